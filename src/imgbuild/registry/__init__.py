"""Image references, credentials, the OCI distribution client and images.lock."""
