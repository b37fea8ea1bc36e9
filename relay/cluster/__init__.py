"""A fleet of relay instances: instance definitions stored as versioned data in ZooKeeper
(``definition``, ``versions``, ``store``, ``diff``) and the rule that places instances over nodes
(``placement``). Sits above ``relay.config``, ``relay.ha`` and ``relay.ops``, below ``relay.cli``.
"""
