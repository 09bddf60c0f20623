"""The `pdkit` operator CLI: argument parsing, the profile's deployment and AWS session for a command,
and operator output. The top layer: it calls ops and render; nothing below imports it.
"""
