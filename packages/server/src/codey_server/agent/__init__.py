"""The agent loop: model providers, tools, the approval gate, and one runner per session."""
