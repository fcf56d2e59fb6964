#!/usr/bin/env python3
"""Drives the queue console in a real browser (Debian's chromium and chromium-driver, through
Python's selenium), as QueueConsoleBrowserTests sets it up:

    console-browser.py CONSOLE_URL GUARDED_URL TOKEN SCREENSHOT_DIR

CONSOLE_URL: a loopback console without a token over a store whose queue `hooks` is paused with
20 pending entries and whose queue `alerts` holds one dead letter with a `<script>` in a header
field and its URL. GUARDED_URL: the same store behind a console with TOKEN. Prints one line per
step passed; exits 1 at the first failure, saying which.
"""
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as error:
    print(f"console-browser: {error}: install with `python3 -m pip install selenium`", file=sys.stderr)
    sys.exit(1)

console, guarded, token, shots, stale_prefix, new_prefix = sys.argv[1:7]
os.makedirs(shots, exist_ok=True)


def fail(message):
    print(f"console-browser: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def status_of(url, method="GET", headers=None, data=None):
    request = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


# The guards, without a browser.
if status_of(guarded + "/") != 401:
    fail("a console with a token answered a request without it")
if status_of(guarded + "/", headers={"Authorization": "Bearer " + token}) != 200:
    fail("a console with a token refused its token")
if status_of(guarded + "/", headers={"Authorization": "Bearer wrong-" + token}) != 401:
    fail("a console with a token took a wrong one")
if status_of(console + "/queues/hooks/pause", method="POST", data=b"x=1",
             headers={"Content-Type": "application/x-www-form-urlencoded"}) != 403:
    fail("a POST without the CSRF token was not refused")

# The login form: its CSRF token from the page, a wrong token refused, the right one a cookie.
class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


opener = urllib.request.build_opener(NoRedirect)
with urllib.request.urlopen(guarded + "/login", timeout=10) as response:
    page = response.read().decode()
    csrf_cookie = response.headers.get("Set-Cookie", "").split(";")[0]
csrf = page.split('name="csrf" value="')[1].split('"')[0]
if not csrf_cookie.startswith("brick_csrf=") or csrf_cookie != "brick_csrf=" + csrf:
    fail(f"the login page's CSRF token is not the browser's own cookie: {csrf_cookie!r}")
# Another visitor of /login gets a token of their own (never one shared by the process).
with urllib.request.urlopen(guarded + "/login", timeout=10) as response:
    other = response.read().decode().split('name="csrf" value="')[1].split('"')[0]
if other == csrf:
    fail("two visitors of /login were handed the same CSRF token")


def log_in(given, cookie=None):
    body = urllib.parse.urlencode({"csrf": csrf, "token": given}).encode()
    request = urllib.request.Request(guarded + "/login", data=body, method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded",
                                              "Cookie": cookie or csrf_cookie})
    try:
        response = opener.open(request, timeout=10)
    except urllib.error.HTTPError as error:
        return error.code, error.headers
    return response.status, response.headers


status, _ = log_in(token, cookie="brick_csrf=" + other)
if status != 403:
    fail(f"a form token with another browser's cookie got {status}, not 403")
status, _ = log_in("wrong-" + token)
if status != 401:
    fail(f"a wrong token at the login form got {status}")
status, headers = log_in(token)
cookie = headers.get("Set-Cookie", "")
if status != 303 or "HttpOnly" not in cookie or "SameSite=Strict" not in cookie or token in cookie:
    fail(f"logging in gave {status} and the cookie {cookie!r}")
session = cookie.split(";")[0]
if status_of(guarded + "/", headers={"Cookie": session}) != 200:
    fail("the session cookie does not open the console")
if status_of(guarded + "/", headers={"Cookie": "brick_console=forged"}) != 401:
    fail("a forged session cookie opened the console")
# Without a token, the console answers only as a loopback name (DNS rebinding: a page of
# attacker.example whose name now resolves to 127.0.0.1 sends Host: attacker.example).
if status_of(console + "/", headers={"Host": "attacker.example:8080"}) != 421:
    fail("a console without a token answered a foreign Host")
if status_of(console + "/", method="HEAD") != 200:
    fail("HEAD / is not answered")
with urllib.request.urlopen(console + "/?done=All%20dead%20letters%20purged", timeout=10) as response:
    if response.headers.get("X-Content-Type-Options") != "nosniff":
        fail("a page lacks X-Content-Type-Options: nosniff")
    if "purged" in response.read().decode():
        fail("text from the URL is shown as the console's own message")
print("guards: 401 without the token, 403 without the CSRF token or with another browser's; 421 for a foreign Host; the login form sets an HttpOnly, SameSite=Strict session cookie; the flash is the console's own")

binary = "/usr/bin/chromium"
driver_path = "/usr/bin/chromedriver"
options = webdriver.ChromeOptions()
options.binary_location = binary
for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900",
                 "--disable-gpu", "--no-first-run", "--disable-extensions"]:
    options.add_argument(argument)
driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
# A page replaced while a condition reads it (a redirect after a POST, the live update) leaves a
# stale element: the condition is then read again, not failed.
from selenium.common.exceptions import StaleElementReferenceException
wait = WebDriverWait(driver, 45, poll_frequency=0.2, ignored_exceptions=[StaleElementReferenceException])
try:
    def cell(name):
        return driver.find_element(By.CSS_SELECTOR, f'[data-count="{name}"]').text

    driver.get(console + "/")
    if cell("hooks pending") != "20":
        fail(f"the overview shows {cell('hooks pending')} pending in hooks, not 20")
    if cell("alerts dead") != "2":
        fail("the overview does not show the two dead letters of alerts")
    driver.save_screenshot(os.path.join(shots, "console-overview-paused.png"))
    print("overview: 20 pending in the paused queue hooks, 2 dead letters in alerts")

    # Queues whose names need encoding in a path: each page shows its own entry under its own
    # name, and Pause acts on that queue (the test then reads the store).
    def queue_row(name):
        """The overview's row of queue `name` (the page is reloaded first); the live updates
        rewrite cells every second, so a lookup that went stale is made again."""
        from selenium.common.exceptions import StaleElementReferenceException
        for _ in range(20):
            try:
                rows = [row for row in driver.find_elements(By.CSS_SELECTOR, "#queues tbody tr")
                        if row.find_element(By.CSS_SELECTOR, "td a").text == name]
                if len(rows) != 1:
                    fail(f"the overview lists the queue {name!r} {len(rows)} times")
                return rows[0], rows[0].text
            except StaleElementReferenceException:
                time.sleep(0.1)
        fail(f"the row of {name!r} kept going stale")

    def click_in_row(name, xpath):
        from selenium.common.exceptions import StaleElementReferenceException
        for _ in range(20):
            try:
                row, _ = queue_row(name)
                row.find_element(By.XPATH, xpath).click()
                return
            except StaleElementReferenceException:
                time.sleep(0.1)
        fail(f"the row of {name!r} kept going stale")

    for name in ["café", "ops/eu west?x=1#f", "q'<b>"]:
        driver.get(console + "/")
        click_in_row(name, ".//button[text()='Pause']")
        wait.until(lambda d: f"{name} paused" in d.find_element(By.TAG_NAME, "body").text)
        driver.get(console + "/")
        _, text = queue_row(name)
        if "paused" not in text:
            fail(f"the queue {name!r} is not shown paused after Pause: {text!r}")
        click_in_row(name, ".//td/a")
        wait.until(lambda d: d.find_elements(By.TAG_NAME, "h1") and "pending" in d.find_element(By.TAG_NAME, "h1").text)
        heading = driver.find_element(By.TAG_NAME, "h1").text
        if heading != f"{name}: pending" or len(driver.find_elements(By.CSS_SELECTOR, "#entries tbody tr")) != 1:
            fail(f"the page of {name!r} reads {heading!r} with {len(driver.find_elements(By.CSS_SELECTOR, '#entries tbody tr'))} entries")
    print("odd names: café, ops/eu west?x=1#f and q'<b> each listed, paused and paged as themselves")
    driver.get(console + "/")

    # Resume hooks: the worker delivers, and the count falls on the page without a reload.
    row = driver.find_element(By.XPATH, "//tr[td/a[text()='hooks']]")
    row.find_element(By.XPATH, ".//button[text()='Resume']").click()
    wait.until(lambda d: "hooks resumed" in d.page_source)
    marker = driver.execute_script("window.notReloaded = true; return window.notReloaded;")
    try:
        wait.until(lambda d: cell("hooks pending") == "0")
    except Exception:
        print(driver.current_url, driver.page_source[:3000])
        live = cell("hooks pending")
        stamp = driver.find_element(By.ID, "updated").text
        logs = driver.get_log("browser") if hasattr(driver, "get_log") else []
        driver.get(console + "/")
        fail(f"pending in hooks stayed at {live} on the page ({stamp!r}; browser log {logs}); reloaded, it reads {cell('hooks pending')}")
    if not driver.execute_script("return window.notReloaded === true;"):
        fail("the page was reloaded: the count did not fall live")
    wait.until(lambda d: cell("hooks delivered") == "20")
    driver.save_screenshot(os.path.join(shots, "console-overview.png"))
    print("live: pending in hooks fell to 0 as the worker delivered, without a reload; 20 delivered")

    # The dead letter: its page shows the stored <script> as text.
    driver.find_element(By.CSS_SELECTOR, '[data-count="alerts dead"]').click()
    wait.until(lambda d: "alerts: dead letters" in d.page_source)
    listed = driver.find_element(By.ID, "entries").text
    if "<script>document.title='pwned2'</script>" not in listed:
        fail(f"the stored URL's <script> is not shown as text: {listed!r}")
    if driver.title == "pwned2":
        fail("a stored URL's <script> ran")
    print("dead letters: a stored URL's <script> reads as text")
    driver.find_element(By.CSS_SELECTOR, "#entries td.mono a").click()
    wait.until(lambda d: d.find_elements(By.ID, "fields"))
    fields = driver.find_element(By.ID, "fields").text
    if "<script>document.title='pwned'</script>" not in fields:
        fail(f"the stored <script> is not shown as text: {fields!r}")
    if driver.title == "pwned" or driver.execute_script("return window.pwned === true;"):
        fail("a stored <script> ran")
    if token in driver.page_source:
        fail("a token is shown")
    driver.save_screenshot(os.path.join(shots, "console-dead-letter.png"))
    print("dead letter: the stored <script> reads as text and did not run")

    # Retry it: the worker delivers it, and the test server answers 200 this time.
    entry_url = driver.current_url
    driver.find_element(By.XPATH, "//button[text()='Retry']").click()
    wait.until(lambda d: "Back to pending" in d.page_source)

    def delivered(d):
        d.get(entry_url)
        return "No entry" in d.page_source
    wait.until(delivered)
    print("retry: the dead letter went back to pending and was delivered")

    # A partner moved: the dead-letter group of queue partner goes to a new address, and only
    # those of its letters whose URL starts with the stale prefix (the test then checks the server
    # and the store).
    driver.get(console + "/")
    group = driver.find_element(By.XPATH, "//table[@id='reasons']//tr[td[1][text()='partner']]")
    group.find_element(By.XPATH, ".//button[starts-with(text(),'Retry')]").click()
    wait.until(lambda d: d.find_elements(By.ID, "rewrite-form"))
    form = driver.find_element(By.ID, "rewrite-form")
    start = form.find_element(By.NAME, "rewrite_from")
    if not stale_prefix.startswith(start.get_attribute("value")):
        fail(f"the rewrite form starts from {start.get_attribute('value')!r}, not the group's scheme and host")
    start.clear()
    start.send_keys(stale_prefix)
    form.find_element(By.NAME, "rewrite_to").send_keys(new_prefix)
    form.find_element(By.XPATH, ".//button").click()
    wait.until(lambda d: d.find_elements(By.ID, "rewrite"))
    heading = driver.find_element(By.TAG_NAME, "h1").text
    if heading != f"Retry 3 dead letters of partner at {new_prefix}…?":
        fail(f"the confirmation reads {heading!r}")
    if "1 of the group does not start with it and stays dead" not in driver.find_element(By.ID, "rewrite").text:
        fail(f"the confirmation does not say one stays dead: {driver.find_element(By.ID, 'rewrite').text!r}")
    driver.save_screenshot(os.path.join(shots, "console-rewrite-url.png"))
    driver.find_element(By.XPATH, "//button[text()='Retry 3 at the new URL']").click()
    wait.until(lambda d: "3 dead letters of partner back to pending at" in d.page_source)
    print("rewrite: 3 dead letters of partner back to pending at the new URL, 1 left dead")
finally:
    driver.quit()
print(json.dumps({"ok": True}))
