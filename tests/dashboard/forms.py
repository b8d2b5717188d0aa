"""Reading a dashboard page's forms as a browser would submit them, for the tests."""

from __future__ import annotations

import html
import re


def form_fields(page: str, form_id: str) -> dict[str, str]:
    """The hidden inputs (and checked radios) of the form ``form_id`` on ``page``."""
    found = re.search(rf'<form[^>]*id="{form_id}"[^>]*>(.*?)</form>', page, re.S)
    assert found is not None, f"no form {form_id}"
    fields: dict[str, str] = {}
    for tag in re.findall(r"<input[^>]*>", found.group(1)):
        name = re.search(r'name="([^"]*)"', tag)
        value = re.search(r'value="([^"]*)"', tag)
        if name is None:
            continue
        if 'type="radio"' in tag and "checked" not in tag:
            continue
        if 'type="hidden"' in tag or 'type="radio"' in tag or value is not None:
            fields[name.group(1)] = html.unescape(value.group(1) if value else "")
    return fields
