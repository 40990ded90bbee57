// Placeholder until the info command lands.
#include "compute/cli/commands.h"
void sluice::cli::add_info_command(CLI::App&) {}
