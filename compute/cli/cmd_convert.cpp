// Placeholder until the convert command lands.
#include "compute/cli/commands.h"
void sluice::cli::add_convert_command(CLI::App&) {}
