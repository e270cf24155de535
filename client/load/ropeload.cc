// ropeload: load generator of ropeserve. See `ropeload --help` and README.md.
#include <iostream>
#include <string>
#include <vector>

#include "client/load/ropeload_command.h"
#include "client/transport_errors.h"

int main(int argc, char** argv) {
  rope::client::QuietGrpcLogging();
  std::vector<std::string> args(argv + 1, argv + argc);
  return rope::load::RunRopeload(args, std::cout, std::cerr);
}
