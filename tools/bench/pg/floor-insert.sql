-- The floor's producer (pgbench script): adds :batch jobs of :payload bytes
-- in one transaction. Run with -D batch=N -D payload=BYTES (see floor.js).
INSERT INTO bench_floor.q (payload) SELECT repeat('x', :payload) FROM generate_series(1, :batch);
