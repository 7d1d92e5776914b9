"""Pure analyses over captured attention (:class:`probe.maps.AttentionMaps`).

Each module holds one concept; none imports the CLI or the report code.
"""
