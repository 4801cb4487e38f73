"""Copies of a base, made while it is in use.

    backup.py   an online copy of a base (`metis-lite copy`), through SQLite's backup API
    publish.py  a copy published for read-only readers (`metis-lite publish`): written beside
                its destination, synced, renamed over it; and a reader's connections, all
                opened of one file (open_copy, reopen)

Following each newest published copy while serving is the service's (service/follow.py).

Its face: backup and publish.
"""
