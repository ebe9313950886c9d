"""Rendering apart from logic: tables, JSON and JUnit of every command's results."""
