//! The `memwall` command line: one module per subcommand (the binary's `main` parses the
//! arguments and calls them).

pub mod front;
pub mod plan;
