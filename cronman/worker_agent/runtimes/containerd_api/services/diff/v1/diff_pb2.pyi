from google.protobuf import any_pb2 as _any_pb2
from cronman.worker_agent.runtimes.containerd_api.types import mount_pb2 as _mount_pb2
from cronman.worker_agent.runtimes.containerd_api.types import descriptor_pb2 as _descriptor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApplyRequest(_message.Message):
    __slots__ = ("diff", "mounts", "payloads")
    class PayloadsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _any_pb2.Any
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_any_pb2.Any, _Mapping]] = ...) -> None: ...
    DIFF_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    PAYLOADS_FIELD_NUMBER: _ClassVar[int]
    diff: _descriptor_pb2.Descriptor
    mounts: _containers.RepeatedCompositeFieldContainer[_mount_pb2.Mount]
    payloads: _containers.MessageMap[str, _any_pb2.Any]
    def __init__(self, diff: _Optional[_Union[_descriptor_pb2.Descriptor, _Mapping]] = ..., mounts: _Optional[_Iterable[_Union[_mount_pb2.Mount, _Mapping]]] = ..., payloads: _Optional[_Mapping[str, _any_pb2.Any]] = ...) -> None: ...

class ApplyResponse(_message.Message):
    __slots__ = ("applied",)
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    applied: _descriptor_pb2.Descriptor
    def __init__(self, applied: _Optional[_Union[_descriptor_pb2.Descriptor, _Mapping]] = ...) -> None: ...

class DiffRequest(_message.Message):
    __slots__ = ("left", "right", "media_type", "ref", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LEFT_FIELD_NUMBER: _ClassVar[int]
    RIGHT_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    left: _containers.RepeatedCompositeFieldContainer[_mount_pb2.Mount]
    right: _containers.RepeatedCompositeFieldContainer[_mount_pb2.Mount]
    media_type: str
    ref: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, left: _Optional[_Iterable[_Union[_mount_pb2.Mount, _Mapping]]] = ..., right: _Optional[_Iterable[_Union[_mount_pb2.Mount, _Mapping]]] = ..., media_type: _Optional[str] = ..., ref: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class DiffResponse(_message.Message):
    __slots__ = ("diff",)
    DIFF_FIELD_NUMBER: _ClassVar[int]
    diff: _descriptor_pb2.Descriptor
    def __init__(self, diff: _Optional[_Union[_descriptor_pb2.Descriptor, _Mapping]] = ...) -> None: ...
