"""Fixtures of the KServe v2 / Triton protocol tests: a real ropeserve on
127.0.0.1 with a model repository, and stubs generated from the project's
proto/inference files.

ctest (tests/kserve/CMakeLists.txt) sets KSERVE_STUBS to the directory of
the generated inference/*_pb2*.py modules, ROPESERVE_BINARY to the built
server and PYTHONPATH to the staged ropeserve package (rope.v1 stubs, for
the bit-for-bit comparisons) and tests/support/python.
"""

import json
import os
import shutil
import sys

import grpc
import pytest

from ropeserve_process import RopeServe

SERVER_ARGS = ["--backend=cpu", "--cpu_threads=1", "--work_threads=2", "--shutdown_grace_period=2s"]
HF_CONFIGS = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf_configs")


def _stubs_dir():
    stubs = os.environ.get("KSERVE_STUBS")
    if not stubs or not os.path.isdir(os.path.join(stubs, "inference")):
        pytest.fail("KSERVE_STUBS must name the generated inference stubs (ctest sets it), got %r"
                    % stubs)
    return stubs


sys.path.insert(0, _stubs_dir())


def ropeserve_binary():
    binary = os.environ.get("ROPESERVE_BINARY")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail("ROPESERVE_BINARY must name the built ropeserve (ctest sets it), got %r" % binary)
    return binary


def write_model(repository, name, fixture, settings):
    folder = os.path.join(repository, name)
    os.makedirs(folder)
    shutil.copy(os.path.join(HF_CONFIGS, fixture), os.path.join(folder, "config.json"))
    with open(os.path.join(folder, "ropeserve.json"), "w") as f:
        json.dump(settings, f)


@pytest.fixture(scope="session")
def repository(tmp_path_factory):
    """llama: rotate with Llama 3.1's config.json; gemma-local: attention on
    Gemma 3's sliding layers."""
    root = str(tmp_path_factory.mktemp("models"))
    write_model(root, "llama", "Llama-3.1-8B-Instruct.json",
                {"operation": "rotate", "max_len": 8192, "datatype": "FP16"})
    write_model(root, "gemma-local", "gemma-3-12b-it.json",
                {"operation": "attention", "layer_type": "sliding_attention", "max_len": 4096})
    return root


@pytest.fixture(scope="session")
def server(repository):
    with RopeServe(ropeserve_binary(), SERVER_ARGS + ["--model_repository=" + repository],
                   metrics=True) as s:
        yield s


@pytest.fixture(scope="session")
def channel(server):
    with grpc.insecure_channel(server.address) as ch:
        yield ch


@pytest.fixture(scope="session")
def kserve(channel):
    from inference import grpc_service_pb2_grpc
    return grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)


@pytest.fixture(scope="session")
def rope(channel):
    from ropeserve.proto import rope_pb2_grpc
    return rope_pb2_grpc.RopeServiceStub(channel)
