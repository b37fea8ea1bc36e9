"""``conf/relay.yaml`` as typed, validated values: one frozen dataclass per YAML section.

The settings of every stage live here (source, store, filters, positions, mapping store, Kafka, publish, HA,
metrics) so that this package imports no runtime module: the runtime modules import their settings from
here, and ``relay.wiring`` turns settings into the parts. Imports ``relay.errors``, ``relay.common``.
"""
