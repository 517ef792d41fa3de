"""Chat channels: drive sessions from outside the browser.

    chat.py      pure: commands parsed, texts formatted and cut, approval buttons' data
    telegram.py  the Telegram bot (python-telegram-bot), long polling or a webhook
    telegram_store.py  where a pasted token and the pairing code are kept (a file and memory,
                 or among replicas rows)
"""
