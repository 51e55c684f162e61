/**
 * The hand-written stream messages (src/wire.ts) against schemas/asyncapi.json: every message's
 * fields, which are required, and the literal types; the post inside `post.created` against the
 * OpenAPI PostLean the generated types carry; the close codes against the document's list.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import ts from "typescript";
import { CloseCode } from "../src/index.js";
import { PACKAGE, REPOSITORY } from "./support/paths.js";

interface Schema {
  required?: string[];
  properties?: Record<string, { const?: string; enum?: string[]; properties?: Record<string, Schema>; required?: string[] } & Schema>;
  description?: string;
}

const asyncapi = JSON.parse(readFileSync(join(REPOSITORY, "schemas", "asyncapi.json"), "utf8")) as {
  info: { description: string };
  components: { schemas: Record<string, Schema> };
};
const openapi = JSON.parse(readFileSync(join(REPOSITORY, "schemas", "openapi.json"), "utf8")) as {
  components: { schemas: Record<string, Schema> };
};

/** Interface name -> property name -> {optional, type text}, read from src/wire.ts by the compiler. */
function interfaces(): Map<string, Map<string, { optional: boolean; type: string }>> {
  const file = join(PACKAGE, "src", "wire.ts");
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, true);
  const out = new Map<string, Map<string, { optional: boolean; type: string }>>();
  source.forEachChild((node) => {
    if (!ts.isInterfaceDeclaration(node)) return;
    const props = new Map<string, { optional: boolean; type: string }>();
    for (const member of node.members) {
      if (ts.isPropertySignature(member) && member.type) {
        props.set(member.name.getText(source), { optional: member.questionToken !== undefined, type: member.type.getText(source) });
      }
    }
    out.set(node.name.text, props);
  });
  return out;
}

const PAIRS = { ReadyMessage: "Ready", PingMessage: "Ping", PostCreatedMessage: "PostCreated" } as const;

test("each message has the document's fields, required where it requires them", () => {
  const declared = interfaces();
  for (const [mine, theirs] of Object.entries(PAIRS)) {
    const schema = asyncapi.components.schemas[theirs] as Schema;
    const props = declared.get(mine);
    assert.ok(props, mine);
    assert.deepEqual([...props.keys()].sort(), Object.keys(schema.properties ?? {}).sort(), `${mine} fields`);
    for (const [name, prop] of props) {
      assert.equal(prop.optional, !(schema.required ?? []).includes(name), `${mine}.${name} optional`);
      const constant = schema.properties?.[name]?.const;
      if (constant !== undefined) assert.equal(prop.type, JSON.stringify(constant), `${mine}.${name}`);
    }
  }
  const reason = asyncapi.components.schemas["Ready"]?.properties?.["reason"];
  const reasonType = declared.get("ReadyMessage")?.get("reason")?.type ?? "";
  for (const code of reason?.properties?.["code"]?.enum ?? []) assert.ok(reasonType.includes(`"${code}"`), code);
});

test("post.created's data is the OpenAPI PostLean (the generated type)", () => {
  const lean = asyncapi.components.schemas["LeanPost"] as Schema;
  const post = openapi.components.schemas["PostLean"] as Schema;
  assert.deepEqual(Object.keys(lean.properties ?? {}).sort(), Object.keys(post.properties ?? {}).sort());
  assert.deepEqual([...(lean.required ?? [])].sort(), [...(post.required ?? [])].sort());
  assert.equal(interfaces().get("PostCreatedMessage")?.get("data")?.type, "PostLean");
});

test("the close codes are the document's", () => {
  const text = asyncapi.info.description;
  for (const [name, code] of Object.entries(CloseCode)) assert.ok(text.includes(`- ${code} `), `${name} ${code}`);
});
