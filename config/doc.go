// Package config reads pegasusd's configuration file (pegasusd --config,
// docs/config.md): the named models, the task types, the MCP servers, the
// tools run by broker workers and the schedules.
//
// The file is YAML; JSON, being YAML's subset, is read as well, so that the
// mcpServers object of Claude Desktop, Cursor or VS Code can be pasted as
// it is. Load decodes strictly (an unknown key is an error), expands
// ${NAME} in string values from the environment, reads apiKeyEnv variables
// and system prompt files, and checks the whole: every problem is one
// *Error naming the file, the line and the key.
//
// Secrets stay out of what the file exports: Hash and Redacted work from
// the file as written (${NAME} references, apiKeyEnv names), with literal
// credentials (an Authorization header, a TOKEN variable, a password in a
// URL) replaced by "<redacted>".
package config
