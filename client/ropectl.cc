// ropectl: command-line client of ropeserve. See `ropectl --help` and
// client/README.md.
#include <iostream>
#include <string>
#include <vector>

#include "client/cli/commands.h"
#include "client/transport_errors.h"

int main(int argc, char** argv) {
  rope::client::QuietGrpcLogging();
  std::vector<std::string> args(argv + 1, argv + argc);
  return rope::client::RunRopectl(args, std::cout, std::cerr);
}
