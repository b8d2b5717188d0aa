"""Integrations that a framework installs as one of its own parts (``contrib.django``: a
Django app), above every feature they configure."""
