"""A small Django project for the middleware tests; settings are loaded only by them."""
