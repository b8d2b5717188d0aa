"""What mideng tells operators: log lines (and, later, metrics and spans)."""
