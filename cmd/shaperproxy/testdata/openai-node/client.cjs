// A real OpenAI Node SDK client behind the proxy (used by clients_test.go):
// node client.cjs PROXY_URL stream|create
// It prints the final assistant message as one JSON object.
const OpenAI = require('./openai.cjs');

async function main() {
  const [base, mode] = process.argv.slice(2);
  const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'sk-test-not-a-key', maxRetries: 0 });
  const params = {
    model: 'deepseek-reasoner',
    messages: [
      { role: 'system', content: 'You are a coding agent.' },
      { role: 'user', content: 'fix the date test' },
    ],
    tools: [{ type: 'function', function: { name: 'read_file', parameters: { type: 'object', properties: { path: { type: 'string' } } } } }],
  };
  let message, finish, saw = false;
  if (mode === 'stream') {
    const stream = client.chat.completions.stream(params);
    stream.on('chunk', (c) => { if (JSON.stringify(c).includes('deliberate')) saw = true; });
    const done = await stream.finalChatCompletion();
    message = done.choices[0].message;
    finish = done.choices[0].finish_reason;
  } else {
    const res = await client.chat.completions.create(params);
    if (JSON.stringify(res).includes('deliberate')) saw = true;
    message = res.choices[0].message;
    finish = res.choices[0].finish_reason;
  }
  const calls = (message.tool_calls || []).map((c) => c.function.name);
  process.stdout.write(JSON.stringify({ content: message.content, finish_reason: finish, tool_calls: calls, saw_deliberate: saw }));
}

main().catch((e) => { console.error(e); process.exit(1); });
