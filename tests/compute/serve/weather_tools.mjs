// tests/compute/serve/weather_tools.mjs: the two tools every tool-call test
// offers, the question that invites a call, and a check of a call's arguments
// against those tools' schemas written by hand (independent of the server's
// grammar, which is what the tests examine).
import assert from "node:assert/strict";

export const tools = [
  { type: "function", function: { name: "get_weather", description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Rome"] },
                                                days: { type: "integer", minimum: 1, maximum: 7 } },
                  required: ["city"] } } },
  { type: "function", function: { name: "get_time", description: "The time in a zone",
    parameters: { type: "object", properties: { zone: { type: "string", maxLength: 8 } }, required: ["zone"] } } },
];
export const question = [{ role: "user", content: "What is the weather in Paris?" }];

// The parsed arguments, once they satisfy the schema of the tool `name`.
export function check_arguments(name, text) {
  const args = JSON.parse(text);
  assert.equal(typeof args, "object", text);
  if (name === "get_weather") {
    assert.ok(["Paris", "Rome"].includes(args.city), text);
    for (const key of Object.keys(args)) assert.ok(["city", "days"].includes(key), text);
    if ("days" in args) assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7, text);
  } else {
    assert.equal(name, "get_time", `a call of an offered tool: ${name}`);
    assert.deepEqual(Object.keys(args), ["zone"]);
    assert.ok(typeof args.zone === "string" && [...args.zone].length <= 8, text);
  }
  return args;
}
