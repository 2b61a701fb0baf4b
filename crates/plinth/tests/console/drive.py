"""The web console in headless Chromium (Debian's, through its ChromeDriver): sign in with a
token, find a Deployment, follow its owner graph down to a pod, edit a label with server-side
apply and find the change in its history under the user's name, read its timeline, follow the
pod's logs, run a command in it, ask who may read pods. Screenshots go to the directory given.

Usage: drive.py BASE_URL TOKEN USER SCREENSHOT_DIR
"""

import sys
import tempfile

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

BASE, TOKEN, USER, SHOTS = sys.argv[1:5]


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in [
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        # The server's certificate is signed by its own CA, which this profile does not know.
        "--ignore-certificate-errors", "--window-size=1400,900",
        "--user-data-dir=" + tempfile.mkdtemp(prefix="plinth-console-"),
    ]:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def main():
    d = browser()
    wait = WebDriverWait(d, 60)
    css = lambda selector: d.find_elements(By.CSS_SELECTOR, selector)
    text = lambda element_id: d.find_element(By.ID, element_id).text
    try:
        d.get(BASE + "/ui/")
        wait.until(lambda _: d.find_element(By.ID, "token").is_displayed())
        d.save_screenshot(f"{SHOTS}/01-sign-in.png")
        d.find_element(By.ID, "token").send_keys("not-a-token")
        d.find_element(By.ID, "login").click()
        wait.until(lambda _: "Sign-in failed" in text("login-error"))
        d.find_element(By.ID, "token").clear()
        d.find_element(By.ID, "token").send_keys(TOKEN)
        d.find_element(By.ID, "login").click()
        wait.until(lambda _: USER in text("whoami"))

        # Find the Deployment; its list is live.
        css('nav#kinds a[data-kind="Deployment"]')[0].click()
        wait.until(lambda _: css('#objects tr[data-name="web"]'))
        wait.until(lambda _: "live" in text("status-line"))
        d.save_screenshot(f"{SHOTS}/02-deployments.png")
        css('#objects tr[data-name="web"]')[0].click()

        # Its owner graph, down to the pods.
        wait.until(lambda _: css('button[data-tab="graph"]'))
        css('button[data-tab="graph"]')[0].click()
        wait.until(lambda _: css('#graph li[data-kind="ReplicaSet"] li[data-kind="Pod"]'))
        pod = css('#graph li[data-kind="Pod"]')[0].get_attribute("data-name")
        d.save_screenshot(f"{SHOTS}/03-owner-graph.png")

        # Edit a label and apply.
        css('button[data-tab="yaml"]')[0].click()
        wait.until(lambda _: css("textarea#yaml"))
        editor = d.find_element(By.ID, "yaml")
        edited = d.execute_script(
            "const t = arguments[0];"
            "t.value = t.value.replace('  labels:\\n    app: web\\n', '  labels:\\n    app: web\\n    tier: frontend\\n');"
            "return t.value;", editor)
        assert "tier: frontend" in edited, edited
        d.find_element(By.ID, "apply").click()
        wait.until(lambda _: "applied" in text("message"))

        # The change in the history, under the user's name.
        css('button[data-tab="history"]')[0].click()
        wait.until(lambda _: css("#revisions tr[data-revision]"))
        rows = css("#revisions tr[data-revision]")
        last = rows[-1]
        assert USER in last.find_element(By.CSS_SELECTOR, "td.user").text, last.text
        assert "apply" in last.text and "plinth-console" in last.text, last.text
        last.click()
        wait.until(lambda _: "+    tier: frontend" in text("diff"))
        d.save_screenshot(f"{SHOTS}/04-history.png")

        # The timeline: the user's apply among the controllers' steps.
        css('button[data-tab="timeline"]')[0].click()
        wait.until(lambda _: css('#timeline tr[data-type="ADDED"]'))
        assert USER in text("timeline"), text("timeline")
        d.save_screenshot(f"{SHOTS}/05-timeline.png")

        # The pod's logs, followed.
        d.get(f"{BASE}/ui/#/o/_/v1/pods/{pod}/logs")
        wait.until(lambda _: css("button#follow"))
        d.find_element(By.ID, "follow").click()
        wait.until(lambda _: "line 2" in text("logs"))
        first = text("logs").count("\n")
        wait.until(lambda _: text("logs").count("\n") > first + 1)
        d.save_screenshot(f"{SHOTS}/06-logs.png")

        # A shell in it.
        css('button[data-tab="exec"]')[0].click()
        wait.until(lambda _: css("button#exec-start"))
        d.find_element(By.ID, "exec-start").click()
        wait.until(lambda _: "[connected]" in text("exec-output"))
        box = d.find_element(By.ID, "exec-command")
        box.send_keys("echo hello-$((6*7))")
        box.send_keys(Keys.ENTER)
        wait.until(lambda _: "hello-42" in text("exec-output"))
        d.save_screenshot(f"{SHOTS}/07-exec.png")

        # Who may read pods.
        d.get(f"{BASE}/ui/#/whocan")
        wait.until(lambda _: css("#whocan-run"))
        d.find_element(By.ID, "whocan-run").click()
        wait.until(lambda _: css("#whocan-table td.subject"))
        subjects = [c.text for c in css("#whocan-table td.subject")]
        assert "default/pod-reader" in subjects, subjects
        d.save_screenshot(f"{SHOTS}/08-who-can.png")
        print("console: every step passed")
    except Exception:
        d.save_screenshot(f"{SHOTS}/failure.png")
        for entry in d.get_log("browser"):
            print("browser:", entry, file=sys.stderr)
        raise
    finally:
        d.quit()


if __name__ == "__main__":
    main()
