#!/usr/bin/env python3
"""proto/inference against Triton's published protocol files, descriptor by
descriptor: every message, field (name, number, type, label, message type),
enum value and service method that ropeserve declares must be declared the
same way in the published grpc_service.proto and model_config.proto, as
compiled into PyPI's tritonclient (tritonclient/grpc/service_pb2.py and
model_config_pb2.py). ropeserve may declare less (it serves a subset); it may
not declare anything differently.

The serialized FileDescriptorProtos are read out of the generated modules'
source without importing them: both sides define package `inference`, and
one process's descriptor pool cannot hold both.

Usage: wire_compat_check.py --stubs DIR  (DIR/inference/*_pb2.py: the
project's stubs); runs in an environment where tritonclient is installed.
Exit status 0: compatible; 1: a difference (each one printed).
"""

import argparse
import ast
import importlib.util
import os
import re
import sys

from google.protobuf import descriptor_pb2


def file_descriptor(path):
    with open(path) as f:
        source = f.read()
    match = re.search(r"AddSerializedFile\((b'.*?')\)", source, re.S)
    if not match:
        raise SystemExit("%s: no serialized descriptor found" % path)
    descriptor = descriptor_pb2.FileDescriptorProto()
    descriptor.ParseFromString(ast.literal_eval(match.group(1)))
    return descriptor


def index(descriptor):
    """{'.inference.Name': DescriptorProto/EnumDescriptorProto} including nested types."""
    out = {}

    def add(prefix, message):
        name = prefix + "." + message.name
        out[name] = message
        for nested in message.nested_type:
            add(name, nested)
        for enum in message.enum_type:
            out[name + "." + enum.name] = enum

    prefix = "." + descriptor.package
    for message in descriptor.message_type:
        add(prefix, message)
    for enum in descriptor.enum_type:
        out[prefix + "." + enum.name] = enum
    return out


def compare(ours, theirs, problems):
    our_types, their_types = index(ours[0]), index(theirs[0])
    for extra in ours[1:]:
        our_types.update(index(extra))
    for extra in theirs[1:]:
        their_types.update(index(extra))
    for name, ours_type in sorted(our_types.items()):
        published = their_types.get(name)
        if published is None:
            problems.append("%s: not in the published files" % name)
            continue
        if isinstance(ours_type, descriptor_pb2.EnumDescriptorProto):
            values = {v.name: v.number for v in published.value}
            for value in ours_type.value:
                if values.get(value.name) != value.number:
                    problems.append("%s.%s = %d: published %s" % (name, value.name, value.number,
                                                                 values.get(value.name)))
            continue
        fields = {f.number: f for f in published.field}
        for field in ours_type.field:
            other = fields.get(field.number)
            if other is None:
                problems.append("%s.%s = %d: no such number in the published message"
                                % (name, field.name, field.number))
                continue
            for attribute in ("name", "type", "label", "type_name"):
                if getattr(field, attribute) != getattr(other, attribute):
                    problems.append("%s field %d: %s %r, published %r" % (
                        name, field.number, attribute, getattr(field, attribute),
                        getattr(other, attribute)))
            if field.HasField("oneof_index") != other.HasField("oneof_index"):
                problems.append("%s.%s: oneof membership differs" % (name, field.name))
    their_services = {s.name: s for d in theirs for s in d.service}
    for service in (s for d in ours for s in d.service):
        published = their_services.get(service.name)
        if published is None:
            problems.append("service %s: not published" % service.name)
            continue
        methods = {m.name: m for m in published.method}
        for method in service.method:
            other = methods.get(method.name)
            if other is None:
                problems.append("rpc %s: not published" % method.name)
                continue
            for attribute in ("input_type", "output_type", "client_streaming", "server_streaming"):
                if getattr(method, attribute) != getattr(other, attribute):
                    problems.append("rpc %s: %s %r, published %r" % (
                        method.name, attribute, getattr(method, attribute),
                        getattr(other, attribute)))
    return len(our_types), sum(len(s.method) for d in ours for s in d.service)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stubs", required=True)
    args = parser.parse_args()
    spec = importlib.util.find_spec("tritonclient")
    if spec is None:
        raise SystemExit("tritonclient is not installed in this Python")
    published_dir = os.path.join(list(spec.submodule_search_locations)[0], "grpc")
    theirs = [file_descriptor(os.path.join(published_dir, "service_pb2.py")),
              file_descriptor(os.path.join(published_dir, "model_config_pb2.py"))]
    ours = [file_descriptor(os.path.join(args.stubs, "inference", "grpc_service_pb2.py")),
            file_descriptor(os.path.join(args.stubs, "inference", "model_config_pb2.py"))]
    problems = []
    types, methods = compare(ours, theirs, problems)
    for problem in problems:
        print("DIFFERENT: " + problem)
    if problems:
        return 1
    print("wire-compatible: %d messages and enums, %d methods of proto/inference match "
          "Triton's published files (tritonclient)" % (types, methods))
    return 0


if __name__ == "__main__":
    sys.exit(main())
