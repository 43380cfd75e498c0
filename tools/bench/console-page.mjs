// The console's overview open in Debian's chromium, headless, until
// SIGTERM: then prints {"reads": N, "failed": M} (overview reads the page
// made and how many of them failed) and exits. Used by
// tools/bench/console.sh; puppeteer-core comes from tests/console/ (npm ci
// there first).
//
//   node tools/bench/console-page.mjs METRICS_URL [SHOT.png SHOT_AFTER_MS]
import { launch } from "../../tests/console/browser.js";

const [url, shot, shotAfter] = process.argv.slice(2);
// (SIGTERM is this script's own: it reports, then closes the browser)
const browser = await launch({ handleSIGTERM: false });
const page = await browser.newPage();
await page.setViewport({ width: 1280, height: 860, deviceScaleFactor: 1 });
let reads = 0, failed = 0;
page.on("response", (r) => {
  if (!r.url().includes("/api/v1/overview")) return;
  if (r.status() === 200) reads++;
  else failed++;
});
page.on("requestfailed", (r) => {
  if (r.url().includes("/api/v1/overview")) failed++;
});
await page.goto(url + "/console/", { waitUntil: "domcontentloaded" });
await page.waitForSelector("#topics");
console.error("console-page: open");
if (shot) {
  setTimeout(async () => {
    await page.screenshot({ path: shot });
    console.error(`console-page: ${shot}`);
  }, Number(shotAfter || 5000));
}
process.on("SIGTERM", async () => {
  console.log(JSON.stringify({ reads, failed }));
  await browser.close();
  process.exit(0);
});
