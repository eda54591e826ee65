#!/usr/bin/env python3
"""Drives shoal's web UI in headless Chromium (selenium), for agent/tests/ui_browser.rs.

Usage: ui_browser.py BASE_URL WORKLOAD REPLICAS HOSTS VICTIM SHOTS_DIR

Checks the mesh page (every host alive), the workloads page, the workload's replicas (all
running), then asks the test to kill VICTIM (prints `kill` and waits for `killed` on stdin) and,
without reloading either page, waits for the mesh page to show VICTIM dead and the workload page
to show every replica running on the other hosts. No console errors. Screenshots go to
SHOTS_DIR. The last line printed is a JSON object of the figures.
"""

import json
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

BASE, WORKLOAD, REPLICAS, HOSTS, VICTIM, SHOTS = sys.argv[1:7]
REPLICAS, HOSTS = int(REPLICAS), int(HOSTS)
WITHIN_S = 5.0


def fail(message):
    print("FAIL: " + message, flush=True)
    sys.exit(1)


def wait_for(what, check, within):
    deadline = time.monotonic() + within
    while True:
        try:
            value = check()
        except Exception:  # a part being replaced mid-read: look again
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            fail("%s: not within %.1f s" % (what, within))
        time.sleep(0.05)


def host_states(driver):
    rows = driver.find_elements(By.CSS_SELECTOR, "#hosts tbody tr")
    return {r.get_attribute("data-node"): r.find_elements(By.TAG_NAME, "td")[1].text for r in rows}


def replica_rows(driver):
    rows = driver.find_elements(By.CSS_SELECTOR, "#replicas tbody tr")
    out = []
    for r in rows:
        cells = [c.text for c in r.find_elements(By.TAG_NAME, "td")]
        out.append({"replica": cells[0], "host": cells[1], "phase": cells[2], "health": cells[3]})
    return out


def settled_elsewhere(driver):
    """Every replica running on a live host: the victim's last known copies may still be listed
    (phase `unknown`, "node ... is not live"), as `shoal status` lists them, but none runs there."""
    rows = replica_rows(driver)
    running = [r for r in rows if r["phase"] == "running"]
    return (
        len(running) == REPLICAS
        and len({r["replica"] for r in running}) == REPLICAS
        and all(r["host"] != VICTIM for r in running)
    )


def main():
    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    figures = {}
    try:
        # The mesh: every host listed alive, with its capacity bars.
        driver.get(BASE + "/")
        states = wait_for("%d hosts alive" % HOSTS,
                          lambda: (lambda s: s if len(s) == HOSTS and all(v == "alive" for v in s.values()) else None)(host_states(driver)),
                          10)
        if len(driver.find_elements(By.CSS_SELECTOR, "#hosts meter")) != 2 * HOSTS:
            fail("two capacity bars per host expected")
        driver.save_screenshot(SHOTS + "/mesh.png")

        driver.get(BASE + "/workloads")
        row = wait_for("the workload listed", lambda: [r for r in driver.find_elements(By.CSS_SELECTOR, "#workloads tbody tr")
                                                       if r.find_element(By.TAG_NAME, "td").text == WORKLOAD], 5)[0]
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        if cells[1] != str(REPLICAS) or cells[2] != str(REPLICAS) or cells[3] != str(REPLICAS):
            fail("workloads row %r: %d desired, running and healthy expected" % (cells, REPLICAS))
        driver.save_screenshot(SHOTS + "/workloads.png")

        driver.get(BASE + "/workloads/%s/replicas/0/logs" % WORKLOAD)
        wait_for("the replica's output", lambda: "hello from replica 0" in driver.find_element(By.TAG_NAME, "pre").text, 5)
        driver.save_screenshot(SHOTS + "/logs.png")
        driver.get(BASE + "/issues")
        driver.save_screenshot(SHOTS + "/issues.png")

        # Two windows (a background tab's timers are throttled): the mesh and the workload, both following live updates.
        driver.get(BASE + "/workloads/" + WORKLOAD)
        rows = wait_for("replicas running", lambda: (lambda r: r if len(r) == REPLICAS and all(x["phase"] == "running" for x in r) else None)(replica_rows(driver)), 10)
        if not any(r["host"] == VICTIM for r in rows):
            fail("no replica on the victim %s: %r" % (VICTIM, rows))
        figures["replicas_on_victim"] = sum(1 for r in rows if r["host"] == VICTIM)
        wait_for("live stream open", lambda: driver.find_element(By.ID, "live-status").text == "live", 5)
        driver.save_screenshot(SHOTS + "/workload.png")
        workload_tab = driver.current_window_handle
        driver.switch_to.new_window("window")
        mesh_tab = driver.current_window_handle
        driver.get(BASE + "/")
        wait_for("live stream open", lambda: driver.find_element(By.ID, "live-status").text == "live", 5)
        for tab in (mesh_tab, workload_tab):
            driver.switch_to.window(tab)
            driver.execute_script("window.__notReloaded = true;")

        print("kill", flush=True)
        if sys.stdin.readline().strip() != "killed":
            fail("the test did not kill the victim")
        killed = time.monotonic()
        dead_s = moved_s = None
        while dead_s is None or moved_s is None:
            if time.monotonic() - killed > WITHIN_S:
                break
            if dead_s is None:
                driver.switch_to.window(mesh_tab)
                try:
                    if host_states(driver).get(VICTIM) == "dead":
                        dead_s = time.monotonic() - killed
                except Exception:
                    pass
            if moved_s is None:
                driver.switch_to.window(workload_tab)
                try:
                    if settled_elsewhere(driver):
                        moved_s = time.monotonic() - killed
                except Exception:
                    pass
            time.sleep(0.05)
        if dead_s is None or moved_s is None:
            for name, tab in (("mesh", mesh_tab), ("workload", workload_tab)):
                driver.switch_to.window(tab)
                print("diag %s: status=%r refreshed=%r rows=%r" % (
                    name, driver.find_element(By.ID, "live-status").text,
                    driver.find_element(By.ID, "main").get_attribute("data-refreshed"),
                    replica_rows(driver) if name == "workload" else host_states(driver)), flush=True)
            print("diag events: %r" % driver.find_element(By.ID, "live-events").text, flush=True)
            print("diag log: %r" % driver.get_log("browser"), flush=True)
        if dead_s is None:
            driver.switch_to.window(mesh_tab)
            fail("%s not shown dead within %.0f s: %r" % (VICTIM, WITHIN_S, host_states(driver)))
        if moved_s is None:
            driver.switch_to.window(workload_tab)
            fail("replicas not shown moved within %.0f s: %r" % (WITHIN_S, replica_rows(driver)))
        figures["dead_shown_s"] = round(dead_s, 2)
        figures["moved_shown_s"] = round(moved_s, 2)
        for tab, shot in ((mesh_tab, "mesh-host-dead.png"), (workload_tab, "workload-moved.png")):
            driver.switch_to.window(tab)
            if not driver.execute_script("return window.__notReloaded === true;"):
                fail("a page was reloaded")
            driver.save_screenshot(SHOTS + "/" + shot)

        driver.switch_to.window(mesh_tab)
        driver.get(BASE + "/events")
        driver.save_screenshot(SHOTS + "/events.png")
        driver.get(BASE + "/no/such/page")
        if "404" not in driver.find_element(By.TAG_NAME, "h1").text:
            fail("no 404 page")

        # Console errors: none, except the 404 just asked for on purpose.
        errors = [e for e in driver.get_log("browser")
                  if e["level"] == "SEVERE" and "/no/such/page" not in e["message"]]
        if errors:
            fail("console errors: %r" % errors)
        figures["console_errors"] = 0
    finally:
        driver.quit()
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
