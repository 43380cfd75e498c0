// Debian's chromium, headless, driven by puppeteer-core (CHROMIUM names
// another binary).
import puppeteer from "puppeteer-core";

export async function launch(options = {}) {
  return puppeteer.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
    ...options,
  });
}

// A page whose errors fail the test that reads them.
export async function open(browser, url) {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  page.errors = errors;
  await page.goto(url, { waitUntil: "domcontentloaded" });
  return page;
}
