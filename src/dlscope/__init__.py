"""dlscope: an open deep-learning profiler."""
__version__ = "0.1.0"
