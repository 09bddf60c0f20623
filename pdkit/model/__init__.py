"""The model: a profile (YAML, validated), the kit's fact tables, and the plan derived from them.

Every decision the kit makes is taken here, once, as plain data; nothing in this layer renders output,
calls AWS or reaches a cluster. It imports only pdkit.errors and its own modules.
"""
