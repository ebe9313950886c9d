"""Push built and smoke-tested images to a registry, with SBOM and signature."""
