"""Web Push: the user's devices, reached when a session needs them or is done.

    notices        (in ``core/notices.py``, shared with the Telegram channel) what to tell
    decide.py      pure: devices added, changed, removed
    fold.py        the devices in the state
    store.py       the VAPID key pair and the subscriptions (a 0600 file, or rows)
    service.py     sends the pushes (pywebpush), tests a device, decides from a notification
    routes.py      ``/api/push``
"""
