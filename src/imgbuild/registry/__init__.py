"""Image references, the registry through docker's own tools (`docker push`, `buildx imagetools`), and images.lock."""
