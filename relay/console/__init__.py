"""``relay console``: the operator console in the browser.

A Starlette application with server-rendered Jinja2 templates, served by uvicorn from ``relay console``
(``relay.console.server``). It answers from the same functions the commands use — ``relay status``,
``relay cluster status|drain|move``, ``relay mapping validate`` and its edits, ``relay snapshot``,
``relay verify``, the schema history of ``relay schema`` — never a second implementation of them:

- ``fleet`` (the relays of ``-c`` configs, or a cluster) and ``samples`` (each instance's status sampled
  into a bounded ring: the charts of the last hours);
- ``mappings`` (an edit checked as the CLI checks it, its diff and moves; apply; rollback), ``topics``
  and ``records`` (topics, offsets, retention runway; the record browser's decoding), ``jobs``
  (snapshots and verify runs), ``ddl`` (the DDL audit from the schema history);
- ``users`` and ``guard`` (the users file, logins, sessions, roles, CSRF, same-origin), ``audit`` (every
  change: who, when, what);
- ``web``, ``app`` and the ``pages_*`` modules (the pages), ``templates/`` and ``static/`` (our own
  script and style sheet: nothing is loaded from elsewhere).

Layer: above ``relay.cluster`` (and so ``relay.ops``, ``relay.wiring`` and everything below), below
``relay.dev`` (the demo starts a console) and ``relay.cli`` (which parses ``relay console``).
"""
