import os

def main():
    """Entry point."""
    pass
