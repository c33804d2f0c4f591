package shaping

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// rng is splitmix64: a tiny deterministic generator, so generated corpora
// are the same on every run and every machine.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	z := uint64(*r)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

func (r *rng) pick(list []string) string { return list[r.intn(len(list))] }

var (
	idents = []string{"parseConfig", "handleUpload", "retryLoop", "cache.Get", "db.Query", "writeHeader",
		"flushEvents", "newLimiter", "ctx.Done", "sync.Pool", "json.Decoder", "os.ReadFile", "resolveHost"}
	files = []string{"server.go", "config.toml", "main.py", "handler.ts", "Cargo.toml", "Dockerfile",
		"auth/middleware.go", "src/lib.rs", "package.json", "docker-compose.yml"}
	enFiller = []string{"Hmm.", "Wait.", "Hmm, let me think.", "Okay so let me see.", "Alright.", "Oh, wait.",
		"Let me think about this more carefully.", "Wait, wait.", "Hmm, that's odd.", "Let me see.",
		"Actually, wait, that doesn't sound right.", "Hmm, maybe not."}
	enTask = []string{"Okay, the user wants to %s.", "The user is asking how to %s.", "Hmm, the user reports that %s fails.",
		"The user wants me to %s without breaking the tests."}
	tasks = []string{"speed up the CSV export", "fix the flaky upload test", "add retries to the HTTP client",
		"migrate the config from YAML to TOML", "reduce memory use of the indexer", "split the monolith into services"}
	enPlain = []string{
		"The function `%[1]s` is called from %[3]d places in %[2]s.",
		"Looking at line %[3]d of %[2]s, the loop never exits when the input is empty.",
		"Maybe the issue is in `%[1]s`, but the logs show %[3]d retries before the error.",
		"That would explain the %[3]d ms latency they see under load.",
		"But %[2]s sets the timeout to %[3]d seconds, which looks too short.",
		"Their benchmark allocates %[3]d MB per request, mostly inside `%[1]s`.",
		"If `%[1]s` returns early, the deferred close in %[2]s never runs.",
		"The stack trace points to %[2]s:%[3]d, inside `%[1]s`.",
		"Another option is to cache the result of `%[1]s` for %[3]d seconds.",
		"On second thought, the race only happens with more than %[3]d goroutines.",
	}
	enDecisive = []string{
		"So the fix is to call `%[1]s` once and reuse the result.",
		"I'll change the timeout in %[2]s to %[3]d seconds.",
		"Therefore the bug is in `%[1]s`, not in %[2]s.",
		"I need to check how %[2]s is loaded before touching `%[1]s`.",
		"The answer is to move `%[1]s` out of the hot loop.",
		"So the root cause is the missing reset in `%[1]s`.",
		"I should explain the cause first and then give the patch for %[2]s.",
		"Let's add a test that reproduces it with %[3]d concurrent requests.",
	}
	zhFiller = []string{"嗯。", "等等。", "让我想想。", "嗯，让我再看看。", "好的。", "我想想。", "啊，不对。", "嗯，等等。"}
	zhTask   = []string{"嗯，用户想要%s。", "用户问怎么%s。", "好的，用户说%s的时候会失败。"}
	zhTasks  = []string{"加快导出速度", "修复上传测试", "给客户端加重试", "把配置从 YAML 换成 TOML", "降低内存占用"}
	zhPlain  = []string{
		"函数 `%[1]s` 在 %[2]s 里被调用了 %[3]d 次。",
		"看 %[2]s 的第 %[3]d 行，输入为空时循环不会退出。",
		"可能问题在 `%[1]s`，但是日志显示重试了 %[3]d 次。",
		"这能解释他们看到的 %[3]d 毫秒延迟。",
		"不过 %[2]s 里把超时设成了 %[3]d 秒，看起来太短了。",
	}
	zhDecisive = []string{
		"所以修复方法是只调用一次 `%[1]s` 并复用结果。",
		"因此问题在 `%[1]s`，而不是 %[2]s。",
		"我决定把 %[2]s 里的超时改成 %[3]d 秒。",
		"接下来我需要先确认 %[2]s 是怎么加载的。",
		"总之，先把 `%[1]s` 移出热循环。",
	}
)

// fill fills a template with details drawn from r.
func (r *rng) fill(tmpl string) string {
	return fmt.Sprintf(tmpl, r.pick(idents), r.pick(files), 2+r.intn(997))
}

// codeFence returns a small fenced snippet.
func (r *rng) codeFence() string {
	return fmt.Sprintf("```go\nfunc %s(n int) int {\n\tif n < %d {\n\t\treturn n\n\t}\n\treturn %s(n-1) + %d\n}\n```",
		"f"+r.pick(idents)[:3], r.intn(100), "f", r.intn(50))
}

// paragraph returns one paragraph of generated reasoning.
func (r *rng) paragraph(zh bool) string {
	var parts []string
	n := 1 + r.intn(4)
	for i := 0; i < n; i++ {
		switch k := r.intn(10); {
		case k < 3 && zh:
			parts = append(parts, r.pick(zhFiller))
		case k < 3:
			parts = append(parts, r.pick(enFiller))
		case k < 8 && zh:
			parts = append(parts, r.fill(r.pick(zhPlain)))
		case k < 8:
			parts = append(parts, r.fill(r.pick(enPlain)))
		case zh:
			parts = append(parts, r.fill(r.pick(zhDecisive)))
		default:
			parts = append(parts, r.fill(r.pick(enDecisive)))
		}
	}
	if zh {
		return strings.Join(parts, "")
	}
	return strings.Join(parts, " ")
}

// block returns one reasoning block of about target runes: a task
// statement, paragraphs with filler, plain and decisive sentences, now and
// then a code fence or a numbered plan, and a closing decision.
func (r *rng) block(target int) string {
	zh := r.intn(4) == 0
	var b strings.Builder
	if zh {
		b.WriteString(fmt.Sprintf(r.pick(zhTask), r.pick(zhTasks)))
	} else {
		b.WriteString(fmt.Sprintf(r.pick(enTask), r.pick(tasks)))
	}
	for utf8.RuneCountInString(b.String()) < target {
		b.WriteString("\n\n")
		switch r.intn(12) {
		case 0:
			b.WriteString(r.codeFence())
		case 1:
			b.WriteString("Plan:\n1. " + r.fill("Reproduce with %[3]d requests.") + "\n2. " +
				r.fill("Patch `%[1]s` in %[2]s.") + "\n3. Run the tests again.")
		default:
			b.WriteString(r.paragraph(zh))
		}
	}
	b.WriteString("\n\n")
	if zh {
		b.WriteString(r.fill(r.pick(zhDecisive)))
	} else {
		b.WriteString(r.fill(r.pick(enDecisive)))
	}
	return b.String()
}

// corpus returns blocks of generated reasoning totalling at least total
// runes in about the given number of blocks (their lengths vary ±30%).
func corpus(seed uint64, total, blocks int) []string {
	r := rng(seed)
	var out []string
	sum, avg := 0, total/blocks
	for sum < total {
		b := r.block(avg*6/10 + r.intn(avg*6/10))
		out = append(out, b)
		sum += utf8.RuneCountInString(b)
	}
	return out
}
