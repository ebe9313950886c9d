"""The project's configuration: frozen models and YAML loading that names file:line:col."""
