/* jsonschema.h — JSON Schema to grammar (text/grammar.h), for structured outputs and strict
 * tool arguments.
 *
 * Supported (the subset the OpenAI structured-outputs docs list, plus a little):
 *   type (a name or a list): object, array, string, number, integer, boolean, null;
 *   properties, required, additionalProperties (false, true or a schema; when absent: no extra
 *     keys if `properties` is given, any keys otherwise — {"type": "object"} is any object);
 *   items (one schema), minItems, maxItems; minLength, maxLength;
 *   enum, const (any JSON values, written compactly); anyOf; oneOf (as anyOf: the alternatives
 *     should not overlap); allOf with one schema; nullable: true (OpenAPI);
 *   $ref to "#" or a JSON pointer into the document ($defs, definitions, ...), recursion included;
 *   true / {} (any value); annotations (title, description, default, examples, $schema, $id,
 *     $comment, ...) and unknown keywords are ignored.
 * Refused with an error naming the keyword and where it is (the server's HTTP 400): pattern,
 * format, minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf, patternProperties,
 * propertyNames, minProperties, maxProperties, uniqueItems, contains, minContains, maxContains,
 * prefixItems, items as a list, additionalItems, unevaluatedProperties, unevaluatedItems, not,
 * if / then / else, dependentRequired, dependentSchemas, dependencies, $ref outside the
 * document, $ref or allOf next to other constraints, more than 64 properties in one object.
 *
 * Objects are written with the declared properties in any order, each at most once, required
 * ones always (the grammar lets the model choose the order); whitespace between tokens is
 * allowed (bounded). */
#ifndef RL_JSONSCHEMA_H
#define RL_JSONSCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "text/grammar.h"

/* Compile `schema` (the document $refs resolve in) into nodes of g. Returns the node id, or -1
 * with err set to one line (e.g. "unsupported JSON Schema keyword 'pattern' at
 * #/properties/zip: remove it or ..."). g is not finished. */
int jsonschema_compile(grammar *g, const cJSON *schema, char *err, size_t cap);

/* The tool-call markup the Qwen3 templates use, one call:
 *   <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
 * tools: chat-form tools ([{"type": "function", "function": {"name", "parameters", "strict"}}]);
 * `name` non-NULL: only that tool. ARGS follows the tool's parameters schema (any JSON object when
 * a tool that is not strict has a schema the grammar cannot express). Returns the node or -1
 * (err: an unsupported keyword in a strict tool's schema ("strict": true or `all_strict`), or an
 * unknown name). */
int jsonschema_tool_call(grammar *g, const cJSON *tools, const char *name, bool all_strict, char *err,
                         size_t cap);

#endif
