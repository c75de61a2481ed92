"""Runnable kubetune examples on real data; each subpackage is one experiment with its demo."""
