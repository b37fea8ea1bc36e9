"""canal's wire formats as our own ``.proto`` files and the conversion of our model to them.

``entry.proto`` (canal's EntryProtocol, outer class ``CanalEntry``) and ``packet.proto`` (canal's
CanalProtocol, outer class ``CanalPacket``) are written from canal 1.1's protocol field tables (field
numbers, oneofs, enums); ``entry_pb2`` / ``packet_pb2`` are generated from them by ``scripts/gen-proto``
(grpcio-tools) and committed. ``convert`` turns ``relay.canal.entry`` values into those messages and back;
it is called by whoever serializes (the canal-protobuf codec, the server) on that caller's thread.
"""
