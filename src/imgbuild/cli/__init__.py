"""Command-line interface: each module parses, calls one function and renders; no logic here."""
