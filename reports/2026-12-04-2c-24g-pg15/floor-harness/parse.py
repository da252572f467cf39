import sys, re, statistics
cur=None; times={}
for line in open(sys.argv[1]):
    line=line.strip()
    if line in ('LIMIT','TAKE','PICK','GENERIC'): cur=line; continue
    m=re.match(r'Time: ([0-9.]+) ms', line)
    if m and cur:
        times.setdefault(cur,[]).append(float(m.group(1)))
        if cur != 'PICK': cur=None
# PICK has BEGIN, SELECT, ROLLBACK timings: take the SELECT (2nd of each triple)
if 'PICK' in times:
    p=times['PICK']; times['PICK']=[p[i] for i in range(1,len(p),3)]
for k,v in times.items():
    v=sorted(v); print(f"{k}: n={len(v)} median={statistics.median(v):.2f} p10={v[len(v)//10]:.2f} p90={v[9*len(v)//10]:.2f}")
