"""Inserting the small per-session tables (nodes, actors, jobs)."""

from __future__ import annotations

import sqlite3

from runtime.server.replay.actors import ActorRow
from runtime.server.replay.jobs import JobRow
from runtime.server.replay.nodes import NodeRow


def insert_nodes(conn: sqlite3.Connection, rows: list[NodeRow]) -> None:
    conn.executemany(
        "INSERT OR REPLACE INTO nodes (node_id, ip, hostname, node_name, state, node_group, is_head, resources_text,"
        " node_json, raw_json, ended_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                r.node_id,
                r.ip,
                r.hostname,
                r.node_name,
                r.state,
                r.node_group,
                int(r.is_head),
                r.resources_text,
                r.node_json,
                r.raw_json,
                r.ended_json,
            )
            for r in rows
        ],
    )


def insert_actors(conn: sqlite3.Connection, rows: list[ActorRow]) -> None:
    conn.executemany(
        "INSERT OR REPLACE INTO actors (actor_id, job_id, node_id, worker_id, state, class_name, repr_name,"
        " required_resources_json, actor_json, ended_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                r.actor_id,
                r.job_id,
                r.node_id,
                r.worker_id,
                r.state,
                r.class_name,
                r.repr_name,
                r.required_resources_json,
                r.actor_json,
                r.ended_json,
            )
            for r in rows
        ],
    )


def insert_jobs(conn: sqlite3.Connection, rows: list[JobRow]) -> None:
    conn.executemany(
        "INSERT OR REPLACE INTO jobs (job_key, job_id, submission_id, sort_key, job_json) VALUES (?, ?, ?, ?, ?)",
        [(r.job_key, r.job_id, r.submission_id, r.sort_key, r.job_json) for r in rows],
    )
