"""A static member leaves its group on a planned stop (KIP-345's LeaveGroup v3).

aiokafka sends no LeaveGroup for a member with a ``group_instance_id`` (nor does Kafka's Java
consumer by default): a static member that stops is expected back, so its partitions wait for
its session to time out. On a planned stop (a deploy, a scale-down) that wait is a pause for
nothing. LeaveGroup v3 names the member by its instance id; aiokafka 0.14 has only v0 and v1,
so the request is declared here, and the coordinator is reached through the consumer's
coordinator (``_coordinator``, not public API): this module is the one place that knows it,
and tests/kafka/test_group_handover.py fails if aiokafka changes under it.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

log = logging.getLogger(__name__)

#: A planned stop waits at most this long for the coordinator's answer.
LEAVE_TIMEOUT_S = 3.0


class LeaveGroupResponseV3(Response):
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")), ("error_code", Int16)),
        ),
    )


class LeaveGroupRequestV3(RequestStruct):
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponseV3
    SCHEMA = Schema(
        ("group_id", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


class StaticLeave(Request[LeaveGroupRequestV3]):
    API_KEY = 13

    def __init__(self, group_id: str, member_id: str, instance_id: str) -> None:
        self._group_id, self._member_id, self._instance_id = group_id, member_id, instance_id

    def build(self, request_struct_class: type[LeaveGroupRequestV3]) -> LeaveGroupRequestV3:
        return request_struct_class(self._group_id, [(self._member_id, self._instance_id)])


async def leave_as_static_member(consumer: AIOKafkaConsumer, group_id: str, instance_id: str) -> bool:
    """Ask the group coordinator to remove this static member now; True if it did. Never raises:
    a member that cannot leave is timed out by its session, as before."""
    coordinator = getattr(consumer, "_coordinator", None)
    member_id = getattr(coordinator, "member_id", "")
    node_id = getattr(coordinator, "coordinator_id", None)
    if coordinator is None or not member_id or node_id is None or getattr(coordinator, "generation", -1) <= 0:
        return False
    try:
        async with asyncio.timeout(LEAVE_TIMEOUT_S):
            response = await consumer._client.send(node_id, StaticLeave(group_id, member_id, instance_id))
    except Exception as exc:  # a stop goes on whatever the coordinator says
        log.warning("could not leave consumer group %s as %s: %s: %s", group_id, instance_id, type(exc).__name__, exc)
        return False
    codes = [response.error_code, *(member[2] for member in response.members)]
    if any(codes):
        log.warning("consumer group %s refused the leave of %s: error codes %s", group_id, instance_id, codes)
        return False
    log.info("left consumer group %s as static member %s", group_id, instance_id)
    return True
