//! Issue 28, part 6: a flood of wrong basic-auth passwords (each one a bcrypt check, tens of
//! milliseconds of CPU by design) must not starve `/metrics`: 2,000 wrong-password requests
//! over 32 connections at once while a scraper with the right credentials asks every 100 ms;
//! every scrape is answered 200 in under a second.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::*;
use dta_http::{BasicAuth, ServerOptions};

fn basic(user: &str, pass: &str) -> String {
    format!(
        "Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
    )
}

#[test]
fn wrong_password_floods_do_not_starve_metrics_scrapes() {
    // Cost 10, as `htpasswd -nBC 10` makes them: a check takes tens of milliseconds.
    let users =
        BasicAuth::new([("prom".to_string(), bcrypt::hash("scrape-me", 10).unwrap())].into())
            .unwrap();
    let s = serve_with(ServerOptions {
        basic_auth: Some(users),
        ..ServerOptions::default()
    });
    let a = s.local_addr();
    // Prometheus has been scraping all along.
    assert_eq!(
        get(a, "GET", "/metrics", &basic("prom", "scrape-me")).0,
        Some(200)
    );
    let flooding = Arc::new(AtomicBool::new(true));
    let scrapes = Arc::new(Mutex::new(Vec::<(Option<u16>, Duration)>::new()));
    let scraper = {
        let (flooding, scrapes) = (flooding.clone(), scrapes.clone());
        std::thread::spawn(move || {
            while flooding.load(Ordering::Relaxed) {
                let t = Instant::now();
                let (st, _) = get(a, "GET", "/metrics", &basic("prom", "scrape-me"));
                scrapes.lock().unwrap().push((st, t.elapsed()));
                std::thread::sleep(Duration::from_millis(100).saturating_sub(t.elapsed()));
            }
        })
    };
    const CONNS: usize = 32;
    const WRONG: usize = 2000;
    let answered = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let flood: Vec<_> = (0..CONNS)
        .map(|c| {
            let answered = answered.clone();
            std::thread::spawn(move || {
                for i in (c..WRONG).step_by(CONNS) {
                    let (st, _) = get(a, "GET", "/metrics", &basic("prom", &format!("guess-{i}")));
                    assert!(
                        matches!(st, Some(401 | 429 | 503)),
                        "a wrong password is refused: {st:?}"
                    );
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for f in flood {
        f.join().unwrap();
    }
    let flood_time = t0.elapsed();
    flooding.store(false, Ordering::Relaxed);
    scraper.join().unwrap();
    let scrapes = scrapes.lock().unwrap().clone();
    eprintln!(
        "{} wrong passwords answered in {flood_time:?}; {} scrapes, slowest {:?}",
        answered.load(Ordering::Relaxed),
        scrapes.len(),
        scrapes.iter().map(|s| s.1).max()
    );
    assert_eq!(answered.load(Ordering::Relaxed), WRONG as u64);
    // The flood cost a few bcrypt checks (one peer: its burst, then one a second), not 2,000;
    // the rest were refused at once and counted.
    let st = s.stats();
    let allowed = dta_http::auth::THROTTLE_BURST as u64
        + flood_time.as_millis() as u64 / dta_http::auth::THROTTLE_REFILL.as_millis() as u64
        + 2;
    assert!(
        st.auth_checks <= allowed,
        "{} bcrypt checks, at most {allowed} expected",
        st.auth_checks
    );
    assert!(
        st.auth_throttled > 0 && st.unauthorized >= WRONG as u64,
        "{st:?}"
    );
    assert!(!scrapes.is_empty(), "scrapes ran during the flood");
    let bad: Vec<_> = scrapes
        .iter()
        .filter(|(st, d)| *st != Some(200) || *d >= Duration::from_secs(1))
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {} scrapes failed or took 1 s or more: {:?}",
        bad.len(),
        scrapes.len(),
        &bad[..bad.len().min(5)]
    );
}
