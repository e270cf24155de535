// ropectl: command-line client of ropeserve. See `ropectl --help` and
// client/README.md.
#include <iostream>
#include <string>
#include <vector>

#include "client/cli/commands.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return rope::client::RunRopectl(args, std::cout, std::cerr);
}
