//! A small OpenTelemetry collector for the tests: it accepts OTLP/HTTP trace exports in the JSON
//! encoding (`POST /v1/traces`) on a loopback port and keeps every span it was sent, with the
//! `service.name` of the resource that sent it.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// One received span, as the collector would store it.
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    /// The exporting resource's `service.name`.
    pub service: String,
    /// The span's name.
    pub name: String,
    /// Its trace id (32 hex digits).
    pub trace_id: String,
    /// Its id (16 hex digits).
    pub span_id: String,
    /// Its parent's id, if it has one.
    pub parent_span_id: Option<String>,
    /// The OTLP span kind (1 internal, 2 server).
    pub kind: u64,
    /// Its attributes, as strings.
    pub attributes: Vec<(String, String)>,
}

/// The running receiver; it stops accepting when the test process ends.
pub struct OtlpReceiver {
    port: u16,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
}

impl OtlpReceiver {
    /// Listens on a free loopback port.
    pub fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || serve(stream, &kept));
            }
        });
        Ok(Self { port, spans })
    }

    /// The endpoint to give `--otlp-endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// Answers the requests of one connection (kept alive) until the client closes it.
fn serve(stream: TcpStream, kept: &Mutex<Vec<ReceivedSpan>>) {
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let accepted = request_line.starts_with("POST /v1/traces ");
        let parsed = serde_json::from_slice::<Value>(&body).ok().filter(|_| accepted);
        let (status, reply) = match &parsed {
            Some(export) => {
                if let Ok(mut spans) = kept.lock() {
                    spans.extend(spans_of(export));
                }
                ("200 OK", "{}")
            }
            None => ("400 Bad Request", r#"{"message":"not an OTLP JSON trace export"}"#),
        };
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            reply.len()
        );
        if writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(reply.as_bytes())).is_err() {
            return;
        }
    }
}

/// The spans of an `ExportTraceServiceRequest` in JSON.
fn spans_of(export: &Value) -> Vec<ReceivedSpan> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let mut out = Vec::new();
    for resource in export["resourceSpans"].as_array().into_iter().flatten() {
        let attributes = resource["resource"]["attributes"].as_array().cloned().unwrap_or_default();
        let service = attributes
            .iter()
            .find(|a| a["key"] == "service.name")
            .map(|a| text(&a["value"]["stringValue"]))
            .unwrap_or_default();
        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
            for span in scope["spans"].as_array().into_iter().flatten() {
                out.push(ReceivedSpan {
                    service: service.clone(),
                    name: text(&span["name"]),
                    trace_id: text(&span["traceId"]),
                    span_id: text(&span["spanId"]),
                    parent_span_id: span["parentSpanId"].as_str().map(str::to_owned),
                    kind: span["kind"].as_u64().unwrap_or(0),
                    attributes: span["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| (text(&a["key"]), text(&a["value"]["stringValue"])))
                        .collect(),
                });
            }
        }
    }
    out
}
