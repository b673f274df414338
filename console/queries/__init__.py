"""The read side beside the commands: what a reader is shown, with one rule for every face (pages,
notebooks, the CLI's reports, the API and MCP) applied here once."""
