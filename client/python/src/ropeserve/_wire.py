"""Protocol-buffer framing of tensor bytes without copying them through protobuf.

Why this is hand-written: protobuf's Python API copies a `bytes` field on
every hop (into the message, out of SerializeToString, and again on each
attribute read), which for a 16 MiB prefill tensor costs more than the
server's work. protobuf's own encoding rules make a message the concatenation
of its fields, in any order; so a request is serialized as
    protobuf(everything except the tensors) + (tag, length, Tensor)...
where each Tensor is protobuf(dtype, shape) + (tag 3, length, raw bytes),
joined once into the bytes gRPC sends. A reply of VIEW_MIN_BYTES or more is
split into its top-level fields; Tensor fields keep their data as a
memoryview into the reply buffer and everything else is parsed by protobuf.
Smaller replies, and messages the split does not expect (a Tensor field
repeated, a group, a malformed varint), are parsed by protobuf alone: for a
decode step its one C call beats walking the fields in Python, and copying a
few KiB costs nothing.
"""

import functools

import numpy as np

from . import _proto

_LENGTH_DELIMITED = 2
VIEW_MIN_BYTES = 64 << 10
_TENSOR_DATA = _proto.TENSOR.fields_by_name["data"].number


def varint(value):
    """The base-128 varint encoding of a non-negative int."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(number, wire_type):
    return varint((number << 3) | wire_type)


def tensor_field(number, dtype, shape, data, nbytes):
    """The wire parts (bytes, then the data buffer) of a Tensor field `number`.

    data: a C-contiguous buffer of exactly nbytes = product(shape) * itemsize bytes.
    """
    return [_tensor_prefix(number, dtype, tuple(shape), nbytes), data]


@functools.lru_cache(maxsize=256)
def _tensor_prefix(number, dtype, shape, nbytes):
    # Cached: decode steps send the same shapes over and over.
    header = _proto.pb.Tensor(dtype=dtype, shape=shape).SerializeToString()
    header += _tag(_TENSOR_DATA, _LENGTH_DELIMITED) + varint(nbytes)
    return _tag(number, _LENGTH_DELIMITED) + varint(len(header) + nbytes) + header


def message_field(number, serialized):
    """The wire bytes of message field `number` holding the serialized message."""
    return _tag(number, _LENGTH_DELIMITED) + varint(len(serialized)) + serialized


def join(head, tensor_parts):
    """The serialized message: `head` (protobuf bytes) followed by tensor fields, one copy."""
    return b"".join([head] + tensor_parts)


class Field:
    """A Tensor from a reply: dtype (rope.v1.DType number), shape (tuple), data (memoryview),
    and address (where data starts in memory, or None when unknown)."""

    __slots__ = ("dtype", "shape", "data", "address")

    def __init__(self, dtype, shape, data, address=None):
        self.dtype = dtype
        self.shape = shape
        self.data = data
        self.address = address


class _Malformed(Exception):
    pass


def _read_varint(buf, pos, end):
    result = 0
    shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed()
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(buf, start, end):
    """Yields (number, wire_type, key_start, value_start, value_end) of the fields in buf[start:end]."""
    pos = start
    while pos < end:
        key_start = pos
        key, pos = _read_varint(buf, pos, end)
        number, wire_type = key >> 3, key & 7
        value_start = pos
        if wire_type == 0:
            _, pos = _read_varint(buf, pos, end)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 2:
            length, value_start = _read_varint(buf, pos, end)
            pos = value_start + length
        elif wire_type == 5:
            pos += 4
        else:
            raise _Malformed()  # groups: not in rope.proto
        if pos > end:
            raise _Malformed()
        yield number, wire_type, key_start, value_start, pos


def _tensor(view, start, end, base_address):
    """The Field of the Tensor message in view[start:end]; its data stays a view."""
    header = []
    data = None
    address = None
    for number, wire_type, key_start, value_start, value_end in _fields(view, start, end):
        if number == _TENSOR_DATA and wire_type == _LENGTH_DELIMITED:
            if data is not None:
                raise _Malformed()
            data = view[value_start:value_end]
            address = base_address + value_start
        else:
            header.append(view[key_start:value_end])
    message = _proto.pb.Tensor.FromString(b"".join(header))
    if data is None:
        data, address = view[0:0], base_address
    return Field(message.dtype, tuple(message.shape), data, address)


_TENSOR_FIELDS_CACHE = {}


def _tensor_fields(message_class):
    """{field number: name} of the Tensor-typed fields of a message class."""
    fields = _TENSOR_FIELDS_CACHE.get(message_class)
    if fields is None:
        fields = {f.number: f.name for f in message_class.DESCRIPTOR.fields
                  if f.message_type is not None and f.message_type.full_name == _proto.TENSOR.full_name}
        _TENSOR_FIELDS_CACHE[message_class] = fields
    return fields


def split_reply(message_class, buf):
    """(protobuf message of the non-Tensor fields, {field name: Field}) of a serialized reply."""
    if len(buf) < VIEW_MIN_BYTES:
        return _parse_with_protobuf(message_class, buf)
    try:
        return _split(message_class, buf)
    except _Malformed:
        return _parse_with_protobuf(message_class, buf)


def _split(message_class, buf):
    view = memoryview(buf)
    base_address = np.frombuffer(view, np.uint8).__array_interface__["data"][0] if len(view) else 0
    tensor_fields = _tensor_fields(message_class)
    rest = []
    tensors = {}
    for number, wire_type, key_start, value_start, value_end in _fields(view, 0, len(view)):
        name = tensor_fields.get(number)
        if name is not None and wire_type == _LENGTH_DELIMITED:
            if name in tensors:
                raise _Malformed()  # a repeated Tensor field merges: let protobuf do it
            tensors[name] = _tensor(view, value_start, value_end, base_address)
        else:
            rest.append(view[key_start:value_end])
    return message_class.FromString(b"".join(rest)), tensors


def _parse_with_protobuf(message_class, buf):
    message = message_class.FromString(bytes(buf))
    tensor_fields = _tensor_fields(message_class)
    tensors = {}
    for field, value in message.ListFields():
        name = tensor_fields.get(field.number)
        if name is not None:
            tensors[name] = Field(value.dtype, tuple(value.shape), value.data)
    return message, tensors
