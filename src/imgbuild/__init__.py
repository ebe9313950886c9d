"""imgbuild: patched vLLM images for NVIDIA DGX Spark (GB10, SM 12.1a)."""

__version__ = "0.2.0"
