// Placeholder until the tokenize commands land.
#include "compute/cli/commands.h"
void sluice::cli::add_tokenize_commands(CLI::App&) {}
