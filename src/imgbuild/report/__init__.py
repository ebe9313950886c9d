"""Rendering apart from logic: tables and JSON of every command's results."""
