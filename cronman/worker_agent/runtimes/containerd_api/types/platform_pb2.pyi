from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Platform(_message.Message):
    __slots__ = ("os", "architecture", "variant")
    OS_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    os: str
    architecture: str
    variant: str
    def __init__(self, os: _Optional[str] = ..., architecture: _Optional[str] = ..., variant: _Optional[str] = ...) -> None: ...
