//! An OpenAI-compatible server that misbehaves on cue, for fault tests of the core's backends: it
//! answers `POST .../chat/completions` as its current [`Behaviour`] says (a good stream, a status, a
//! stall, a malformed or cut stream) and `GET .../models` always, so the core's health probe keeps
//! finding it up. Plain HTTP/1.1 on a loopback port, one thread per connection, closed after each answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the server does with the next generations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Streams this text, one word per chunk, then a finish reason, the usage and `[DONE]`.
    Answer(String),
    /// Refuses with this status and an OpenAI-shaped error body.
    Status(u16),
    /// Sends nothing for a minute (or until the server stops).
    Stall,
    /// Sends one good chunk, then one that is not JSON.
    MalformedAfterFirst,
    /// Sends one good chunk, then closes the connection without `[DONE]`.
    CutAfterFirst,
}

/// The running server; stops when dropped.
pub struct ScriptedBackend {
    url: String,
    behaviour: Arc<Mutex<Behaviour>>,
    generations: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl ScriptedBackend {
    /// Starts on a free loopback port, answering with `behaviour`.
    pub fn start(behaviour: Behaviour) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let url = format!("http://{}/v1", listener.local_addr()?);
        let behaviour = Arc::new(Mutex::new(behaviour));
        let generations = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let shared = (behaviour.clone(), generations.clone(), stop.clone());
        std::thread::spawn(move || {
            let (behaviour, generations, stop) = shared;
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (behaviour, generations, stop) =
                            (behaviour.clone(), generations.clone(), stop.clone());
                        std::thread::spawn(move || {
                            let _ = serve(stream, &behaviour, &generations, &stop);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Self { url, behaviour, generations, stop })
    }

    /// The API base (`http://127.0.0.1:PORT/v1`), as `--openai-backends` takes it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Changes what the next generations get.
    pub fn set(&self, behaviour: Behaviour) {
        *self.behaviour.lock().unwrap_or_else(|e| e.into_inner()) = behaviour;
    }

    /// Generation requests received so far (every try counts).
    pub fn generations(&self) -> usize {
        self.generations.load(Ordering::Relaxed)
    }
}

impl Drop for ScriptedBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(
    stream: TcpStream,
    behaviour: &Mutex<Behaviour>,
    generations: &AtomicUsize,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.trim().eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length.min(1 << 20)];
    reader.read_exact(&mut body)?;
    let mut out = stream;
    if request_line.starts_with("GET") {
        let models = r#"{"object":"list","data":[{"id":"scripted","object":"model"}]}"#;
        return respond(&mut out, 200, "application/json", models);
    }
    generations.fetch_add(1, Ordering::Relaxed);
    let behaviour = behaviour.lock().unwrap_or_else(|e| e.into_inner()).clone();
    match behaviour {
        Behaviour::Answer(text) => {
            head(&mut out)?;
            let words: Vec<&str> = text.split_inclusive(' ').collect();
            for word in &words {
                chunk(&mut out, &delta(word))?;
            }
            chunk(
                &mut out,
                r#"{"id":"s","object":"chat.completion.chunk","created":1,"model":"scripted","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            )?;
            let usage = format!(
                r#"{{"id":"s","object":"chat.completion.chunk","created":1,"model":"scripted","choices":[],"usage":{{"prompt_tokens":9,"completion_tokens":{},"total_tokens":{}}}}}"#,
                words.len(),
                words.len() + 9
            );
            chunk(&mut out, &usage)?;
            chunk(&mut out, "[DONE]")
        }
        Behaviour::Status(status) => {
            let body = format!(r#"{{"error":{{"message":"scripted {status}","type":"server_error"}}}}"#);
            respond(&mut out, status, "application/json", &body)
        }
        Behaviour::Stall => {
            let until = Instant::now() + Duration::from_secs(60);
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(())
        }
        Behaviour::MalformedAfterFirst => {
            head(&mut out)?;
            chunk(&mut out, &delta("Half "))?;
            chunk(&mut out, "{not json")
        }
        Behaviour::CutAfterFirst => {
            head(&mut out)?;
            chunk(&mut out, &delta("Half "))
        }
    }
}

fn delta(text: &str) -> String {
    let text = serde_json::Value::String(text.to_owned());
    format!(
        r#"{{"id":"s","object":"chat.completion.chunk","created":1,"model":"scripted","choices":[{{"index":0,"delta":{{"content":{text}}},"finish_reason":null}}]}}"#
    )
}

fn head(out: &mut TcpStream) -> std::io::Result<()> {
    out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
}

fn chunk(out: &mut TcpStream, data: &str) -> std::io::Result<()> {
    out.write_all(format!("data: {data}\n\n").as_bytes())?;
    out.flush()
}

fn respond(out: &mut TcpStream, status: u16, content_type: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} Scripted\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    out.write_all(head.as_bytes())?;
    out.write_all(body.as_bytes())?;
    out.flush()
}
