"""What a librdkafka error means for the relay: stop (fatal), give up on the record (rejected), or retry.

Owns ``classify`` and the error-code sets it and the publisher's parts decide by: ``REJECTED_CODES``
(the record will never be accepted), ``FATAL_CODES`` (the producer instance is unusable), ``FENCED_CODES``
(a newer producer with our ``transactional.id`` exists), ``UNKNOWN_TOPIC_CODES`` and ``SIZE_CODES``; and
``describe``, how every log line and error names a librdkafka error. What the publisher then *does* with a
failed delivery — retry the batch, reject, dead-letter — is ``relay.kafka.delivery``'s.

Pure functions and constants, no I/O: called on the publisher thread.
"""

from __future__ import annotations

from typing import Literal

from confluent_kafka import KafkaError

Verdict = Literal["fatal", "rejected", "retriable"]

# Errors after which this record will never be accepted, whatever we retry (KafkaError codes).
REJECTED_CODES: frozenset[int] = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,  # also librdkafka's local size check at produce()
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_EXCEPTION,  # Kafka's INVALID_TOPIC_EXCEPTION
        KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        KafkaError.POLICY_VIOLATION,
        KafkaError.INVALID_REQUIRED_ACKS,
        KafkaError._INVALID_ARG,
        KafkaError._INVALID_TYPE,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._KEY_SERIALIZATION,
        KafkaError._VALUE_SERIALIZATION,
    }
)
UNKNOWN_TOPIC_CODES: frozenset[int] = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})
SIZE_CODES: frozenset[int] = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
# librdkafka fails queued messages with _FATAL once the producer raised a fatal error (fencing, a
# sequence gap it cannot repair); the instance is unusable from then on.
FATAL_CODES: frozenset[int] = frozenset({KafkaError._FATAL, KafkaError._FENCED, KafkaError.PRODUCER_FENCED})
# A newer producer with our transactional.id exists (transactional mode): this relay's term is over.
FENCED_CODES: frozenset[int] = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)


def classify(error: KafkaError) -> Verdict:
    """What a failed delivery means for the relay: stop (fatal), give up on the record, or retry later.

    Delivery reports carry no ``retriable()`` flag of their own (it is set only for errors of API calls),
    so the verdict comes from the code; ``fatal()`` is honoured wherever librdkafka sets it. An unknown
    topic or partition is retriable whatever ``topics.create`` says: brokers answer it for a moment
    while metadata propagates or a leader moves, and it says nothing about the record — a good record
    must never be dead-lettered (nor the position moved past it) for it. A topic that is really gone
    is found when the batch is sent again (``MissingTopicError``, retried with backoff).
    """
    code = error.code()
    if error.fatal() or code in FATAL_CODES:
        return "fatal"
    if code in REJECTED_CODES:
        return "rejected"
    return "retriable"


def describe(err: KafkaError) -> str:
    """``MSG_SIZE_TOO_LARGE (Broker: Message size too large)``: a librdkafka error in logs and messages."""
    return f"{err.name()} ({err.str()})"
