# The harness image the k8s target's load Job runs (`load_image` in the cluster settings): layerbench's client
# only, no engine. Build it and push it where your cluster pulls from, then name it in --cluster-config:
#   docker build -t <registry>/layerbench:<tag> . && docker push <registry>/layerbench:<tag>
FROM python:3.11-slim
WORKDIR /opt/layerbench
COPY pyproject.toml README.md ./
COPY locks/client.txt locks/client.txt
COPY harness harness
COPY stacks stacks
COPY manifests manifests
COPY baselines baselines
# every dependency from the hashed lock, as `make setup` installs the client (scripts/setup_client.sh), then
# layerbench itself without resolving anything again; editable, so that the project root (manifests/, baselines/,
# the built-in profiles) is where the code expects it
RUN pip install --no-cache-dir --require-hashes -r locks/client.txt \
 && pip install --no-cache-dir --no-deps --no-build-isolation -e . \
 && useradd --uid 10001 --home-dir /tmp --no-create-home layerbench
USER 10001
# the Job and the docker target name the command: `layerbench ...`
CMD ["layerbench", "--help"]
