// berthd's console in a real browser (Debian's chromium, headless) against a
// real berthd: what the page shows is what the admin surface says, an
// operator's retry goes through, values from tasks stay text, the key is
// asked for and checked, and another origin can change nothing.
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, describe, test } from "node:test";

import { startBerthd } from "./berthd.js";
import { launch, open } from "./browser.js";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

// A task of topic made terminal by a test worker: its id.
async function terminalTask(d, topic, payload = "p", message = "the disk is full") {
  await d.cli("submit", topic, payload);
  const { tasks } = await d.cli("fetch", topic, "--worker", "w", "--max", "1");
  assert.equal(tasks.length, 1);
  await d.cli("fail", tasks[0].id, "--worker", "w", "--token", tasks[0].lock_token,
    "--code", "BROKEN", "--message", message, "--retries-left", "0");
  return tasks[0].id;
}

// The text of each cell of the topics table, by topic and column.
async function topicRows(page) {
  return page.$$eval("#topics tbody tr[data-topic]", (rows) => Object.fromEntries(rows.map((r) => [
    r.dataset.topic,
    Object.fromEntries([...r.querySelectorAll("td[data-k]")].map((td) => [td.dataset.k, td.textContent])),
  ])));
}

describe("the page's own SHA-256 and HMAC", () => {
  test("match FIPS 180-4 and RFC 4231", async () => {
    const d = await startBerthd();
    try {
      const page = await open(browser, d.metrics + "/console/");
      await page.waitForFunction(() => window.berthConsole !== undefined);
      const got = await page.evaluate(() => {
        const { sha256, hmacSha256, hex } = window.berthConsole;
        const t = (s) => new TextEncoder().encode(s);
        const rep = (b, n) => new Uint8Array(n).fill(b);
        return {
          empty: hex(sha256(t(""))),
          abc: hex(sha256(t("abc"))),
          two: hex(sha256(t("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
          million: hex(sha256(rep(0x61, 1000000))),
          rfc1: hex(hmacSha256(rep(0x0b, 20), t("Hi There"))),
          rfc2: hex(hmacSha256(t("Jefe"), t("what do ya want for nothing?"))),
          rfc3: hex(hmacSha256(rep(0xaa, 20), rep(0xdd, 50))),
          rfc6: hex(hmacSha256(rep(0xaa, 131), t("Test Using Larger Than Block-Size Key - Hash Key First"))),
        };
      });
      assert.deepEqual(got, {
        empty: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        abc: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        two: "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
        million: "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
        rfc1: "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
        rfc2: "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
        rfc3: "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
        rfc6: "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
      });
      assert.deepEqual(page.errors, []);
    } finally {
      await d.stop();
    }
  });
});

describe("without a key, on loopback", () => {
  let d;
  before(async () => {
    d = await startBerthd();
  });
  after(async () => {
    await d.stop();
  });

  test("the overview shows the counts berth stats shows, and keeps them live", async () => {
    for (let i = 0; i < 3; i++) await d.cli("submit", "orders", "o" + i);
    await d.cli("submit", "mail", "m", "--delay", "10m");
    await d.cli("fetch", "orders", "--worker", "w", "--max", "1");
    await terminalTask(d, "reports");
    const page = await open(browser, d.metrics + "/console/");
    await page.waitForSelector("#topics tbody tr[data-topic='reports']");
    const stats = await d.cli("stats");
    const rows = await topicRows(page);
    assert.deepEqual(Object.keys(rows).sort(), stats.topics.map((t) => t.topic).sort());
    for (const t of stats.topics)
      for (const k of ["ready", "delayed", "locked", "backoff", "terminal", "waiting_fetches"])
        assert.equal(rows[t.topic][k], t[k].toLocaleString("en-US"), `${t.topic} ${k}`);
    // Live: a new task shows without a reload.
    await d.cli("submit", "orders", "later");
    const want = (stats.topics.find((t) => t.topic === "orders").ready + 1).toLocaleString("en-US");
    await page.waitForFunction((w) =>
      document.querySelector("#topics tr[data-topic='orders'] td[data-k='ready']")?.textContent === w, {}, want);
    assert.match(await page.$eval("#status", (e) => e.textContent), /^live/);
    assert.deepEqual(page.errors, []);
    await page.close();
  });

  test("a terminal task is retried from Incidents, completed, and is gone", async () => {
    const id = await terminalTask(d, "printing");
    const page = await open(browser, d.metrics + "/console/#/incidents");
    const row = `#incidents tr[data-subject='${id}']`;
    await page.waitForSelector(row);
    await page.click(`${row} button.retry`);
    await page.waitForSelector(".dialog");
    await page.type("#retries", "2");
    await page.click("#confirm-ok");
    await page.waitForFunction(() => /Retry task: done/.test(document.getElementById("banner").textContent));
    const t = await d.cli("admin", "task", id);
    assert.equal(t.task.state, "READY");
    assert.equal(t.task.retries_left, 2);
    // A worker completes it; the page shows it gone.
    const { tasks } = await d.cli("fetch", "printing", "--worker", "w2", "--max", "1");
    assert.equal(tasks[0].id, id);
    await d.cli("complete", id, "--worker", "w2", "--token", tasks[0].lock_token);
    await page.waitForFunction((sel) => document.querySelector(sel) === null, {}, row);
    await page.goto(d.metrics + "/console/#/task/" + id);
    await page.waitForSelector(".empty");
    assert.match(await page.$eval("main", (e) => e.textContent), /no task/);
    assert.ok(d.stderr().includes(`berthd: admin: console loopback retry_terminal ${id}`));
    await page.close();
  });

  test("Discard asks first; Cancel changes nothing", async () => {
    const id = await terminalTask(d, "printing2");
    const page = await open(browser, d.metrics + "/console/#/incidents");
    const row = `#incidents tr[data-subject='${id}']`;
    await page.waitForSelector(row);
    await page.click(`${row} button.discard`);
    await page.click("#confirm-cancel");
    assert.equal((await d.cli("admin", "task", id)).task.state, "TERMINAL");
    await page.click(`${row} button.discard`);
    await page.click("#confirm-ok");
    await page.waitForFunction((sel) => document.querySelector(sel) === null, {}, row);
    await assert.rejects(d.cli("admin", "task", id));
    await page.close();
  });

  test("values from a task are shown as text, never run", async () => {
    const evil = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>";
    const { id } = await d.cli("submit", "xss", evil, "--header", "x-evil=<img src=x onerror=window.__pwned=3>");
    const bad = await terminalTask(d, "xss2", "p", "<img src=x onerror=window.__pwned=4>");
    const page = await open(browser, d.metrics + "/console/#/task/" + id);
    await page.waitForSelector("#payload");
    assert.equal(await page.$eval("#payload", (e) => e.textContent), evil);
    assert.ok((await page.$eval("main", (e) => e.textContent)).includes("<img src=x onerror=window.__pwned=3>"));
    await page.goto(d.metrics + "/console/#/incidents");
    await page.waitForSelector(`#incidents tr[data-subject='${bad}']`);
    assert.ok((await page.$eval("#incidents", (e) => e.textContent)).includes("<img src=x onerror=window.__pwned=4>"));
    await sleep(300);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    assert.equal(await page.$$eval("main img, main script", (n) => n.length), 0);
    await page.close();
  });

  test("a page of another origin changes nothing", async () => {
    const id = await terminalTask(d, "guarded");
    const target = `${d.metrics}/api/v1/tasks/${id}/discard`;
    const retry = `${d.metrics}/api/v1/tasks/${id}/retry`;
    // The attacker's page: a form posted at once, and fetches that try
    // JSON with the console's header (needs a preflight berthd never
    // grants) and a "simple" text/plain one (sent, but refused).
    const html = `<!doctype html><body>
      <iframe name="sink"></iframe>
      <form id="f" method="POST" action="${target}" enctype="text/plain" target="sink">
        <input name='{"retries":1,"x":"' value='"}'></form>
      <script>
        document.getElementById("f").submit();
        fetch("${retry}", { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: "{}" })
          .then(() => { window.simple = "sent"; }, (e) => { window.simple = "failed"; });
        fetch("${retry}", { method: "POST", headers: { "Content-Type": "application/json", "X-Berth-Console": "1" }, body: "{}" })
          .then(() => { window.json = "answered"; }, () => { window.json = "blocked"; });
      </script></body>`;
    const evil = http.createServer((req, res) => {
      res.writeHead(200, { "Content-Type": "text/html" });
      res.end(html);
    });
    await new Promise((r) => evil.listen(0, "127.0.0.1", r));
    try {
      const page = await open(browser, `http://127.0.0.1:${evil.address().port}/`);
      await page.waitForFunction(() => window.simple !== undefined && window.json !== undefined);
      assert.equal(await page.evaluate(() => window.json), "blocked");
      await sleep(500); // the form's post
      const t = await d.cli("admin", "task", id);
      assert.equal(t.task.state, "TERMINAL");
      assert.equal(t.task.retries_left, 0);
      await page.close();
    } finally {
      evil.close();
    }
  });

  test("a topic's tasks are paged as list_tasks pages them, by state", async () => {
    for (let i = 0; i < 53; i++) await d.cli("submit", "paged", "t" + i);
    await d.cli("submit", "paged", "later", "--delay", "1h");
    const page = await open(browser, d.metrics + "/console/#/topic/paged");
    await page.waitForSelector("#tasks tbody tr[data-id]");
    assert.equal((await page.$$("#tasks tbody tr[data-id]")).length, 50);
    const first = await page.$$eval("#tasks tbody tr[data-id]", (r) => r.map((x) => x.dataset.id));
    await Promise.all([page.waitForNavigation(), page.click("a[href*='/after/']")]).catch(() => {});
    await page.waitForFunction(() => document.querySelectorAll("#tasks tbody tr[data-id]").length === 4);
    const second = await page.$$eval("#tasks tbody tr[data-id]", (r) => r.map((x) => x.dataset.id));
    assert.equal(new Set([...first, ...second]).size, 54, "each task once");
    await page.goto(d.metrics + "/console/#/topic/paged/delayed");
    await page.waitForFunction(() => document.querySelectorAll("#tasks tbody tr[data-id]").length === 1);
    assert.equal(await page.$eval("#tasks tbody tr[data-id] td:nth-child(2)", (e) => e.textContent), "delayed");
    await page.close();
  });

  test("deployments show their versions, channels and gate", async () => {
    await d.cli("admin", "deploy", "shop", "--channel", "orders-v,content-types=application/json|text/plain",
      "--channel", "mail-v");
    await d.cli("admin", "deploy", "shop", "--channel", "orders-v");
    const page = await open(browser, d.metrics + "/console/#/deployments");
    await page.waitForSelector("article.deployment[data-id='shop'][data-version='2']");
    const text = await page.$$eval("article.deployment[data-id='shop']", (a) => a.map((x) => x.textContent));
    assert.equal(text.length, 2);
    assert.match(text[0], /v2\s*live/);
    assert.match(text[1], /v1\s*(draining|retired)/);
    assert.ok(text[1].includes("application/json, text/plain"));
    assert.ok(text[1].includes("mail-v"));
    assert.equal(await page.$eval("#calls-waiting", (e) => e.textContent), "0");
    await page.close();
  });

  test("reads well on a narrow screen", async () => {
    const page = await browser.newPage();
    await page.setViewport({ width: 375, height: 740, deviceScaleFactor: 1 });
    await page.goto(d.metrics + "/console/", { waitUntil: "domcontentloaded" });
    await page.waitForSelector("#topics tbody tr[data-topic]");
    const { doc, cards } = await page.evaluate(() => ({
      doc: document.documentElement.scrollWidth,
      cards: [...document.querySelectorAll(".card")].map((c) => c.getBoundingClientRect().width),
    }));
    assert.ok(doc <= 375, `the page is ${doc} px wide`);
    for (const w of cards) assert.ok(w > 300, "one column of cards");
    await page.close();
  });
});

describe("a push channel whose receiver is not there", () => {
  test("a poisoned delivery is retried from Incidents", async () => {
    // Nothing listens on port 1: one failed attempt poisons the delivery.
    const d = await startBerthd({ args: ["--delivery-attempts", "1", "--push-timeout-ms", "200",
      "--channel", "hooks,transport=nng+req://127.0.0.1:1"] });
    try {
      await d.cli("submit", "hooks", "ping");
      const page = await open(browser, d.metrics + "/console/#/incidents");
      const row = "#incidents tr[data-kind='DELIVERY_POISONED']";
      await page.waitForSelector(`${row} button.retry-delivery`, { timeout: 20_000 });
      const id = await page.$eval(row, (r) => r.dataset.subject);
      assert.equal((await d.cli("stats")).poisoned, 1);
      await page.click(`${row} button.retry-delivery`);
      await page.click("#confirm-ok");
      await page.waitForFunction(() => /Retry delivery: done/.test(document.getElementById("banner").textContent));
      assert.ok(d.stderr().includes(`berthd: admin: console loopback retry_delivery ${id}`));
      // Re-armed, it is sent again (and, still unanswered, poisoned again).
      await page.waitForFunction(async () => {
        const r = await fetch("/api/v1/incidents?open=false");
        return (await r.json()).incidents.length === 2;
      }, { timeout: 20_000, polling: 300 });
      await page.close();
    } finally {
      await d.stop();
    }
  });
});

describe("with an admin key", () => {
  const key = "console-browser-key-0123456789abcdef0123456789";
  let d;
  before(async () => {
    d = await startBerthd({ key });
  });
  after(async () => {
    await d.stop();
  });

  test("nothing is shown before the key; a wrong one is refused; the right one works", async () => {
    await d.cli("submit", "secret-topic", "s");
    const page = await open(browser, d.metrics + "/console/");
    await page.waitForSelector("#key-form");
    assert.equal(await page.$("#topics"), null);
    assert.ok(!(await page.content()).includes("secret-topic"));
    await page.type("#key", "not-the-key-0123456789abcdef0123456789");
    await page.click("#key-form button");
    await page.waitForSelector("#key-refusal");
    assert.match(await page.$eval("#key-refusal", (e) => e.textContent), /refused/);
    assert.equal(await page.$("#topics"), null);
    await page.type("#key", key);
    await page.click("#key-form button");
    await page.waitForSelector("#topics tr[data-topic='secret-topic']");
    // The key stays in the tab, never in a request.
    const sent = [];
    page.on("request", (r) => sent.push(JSON.stringify(r.headers()) + r.url()));
    await sleep(1500);
    assert.ok(sent.length > 0);
    for (const s of sent) assert.ok(!s.includes(key));
    // A change, signed.
    const id = await terminalTask(d, "keyed");
    await page.goto(d.metrics + "/console/#/incidents");
    await page.waitForSelector(`#incidents tr[data-subject='${id}'] button.retry`);
    await page.click(`#incidents tr[data-subject='${id}'] button.retry`);
    await page.click("#confirm-ok");
    await page.waitForFunction(() => /Retry task: done/.test(document.getElementById("banner").textContent));
    assert.equal((await d.cli("admin", "task", id)).task.state, "READY");
    assert.match(d.stderr(), /berthd: admin: console key:[0-9a-f]{16} retry_terminal/);
    assert.deepEqual(page.errors.filter((e) => !e.includes("401")), []);
    await page.close();
  });
});
