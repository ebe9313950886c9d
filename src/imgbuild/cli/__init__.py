"""Command-line interface. Each module forwards to the engine; no logic here."""
